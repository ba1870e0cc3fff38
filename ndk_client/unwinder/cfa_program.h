// Executes CFA programs (DWARF 5 section 6.4.2): a CIE's initial instructions, then an FDE's
// instructions up to a pc, giving the row of the call-frame table that holds there. Internal to
// the unwinder; CfiTable calls it once per looked-up pc. Allocation-free (the remember_state
// stack lives on the caller's stack) and bounded in instructions and state depth.
#pragma once

#include <stdint.h>

#include "unwinder/cfi_entries.h"
#include "unwinder/dwarf_cfi.h"

namespace droidheap {
namespace cfi {

// Overwrites `row` with the rules that hold at `pc` (which the caller has checked lies in
// [fde.pc_begin, fde.pc_end)), including its pc range. False on a malformed, unsupported or
// over-long program, or when no CFA rule results. `return_address_register` and `signal_frame`
// are left to the caller.
bool RunCfaPrograms(const CfiSectionView& section, bool debug_frame, const Cie& cie,
                    const Fde& fde, uint64_t pc, CfiRow* row);

}  // namespace cfi
}  // namespace droidheap

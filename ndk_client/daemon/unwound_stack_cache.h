// The stacks a process's samples were already unwound to, so that a sample whose stack unwinds
// alike costs a lookup and a few compared words instead of an unwind: the same call path sampled
// again (a loop allocating) is most samples of most programs.
//
// Exact, not a guess: an unwind's result is a function of the maps and of what it used -- the
// initial registers, the words its return addresses and frame addresses came from (UnwindInputs).
// An entry keeps those with the result; a new sample with the same pc, sp and stack top whose
// registers and words hold the same values there would be unwound to the same frames, so it is
// booked to the entry's call stack. The words it read and did not use (the program's callee-saved
// registers, restored on the way) may differ. A word is the stack copy's, or, on a stack deeper
// than its copy (the client copies max_stack_bytes at most), the process's own past the copy,
// read as the sample is looked up just as an unwind of it would read it then. Unwinds that took a
// path the inputs do not follow are not kept.
//
// One per client, used by its unwinding worker alone. Sets of kWays entries by (pc, sp, stack
// top), the least recently used one replaced; entries of older maps are never found. Allocated at
// the first entry kept, kMinSets sets, and grown (emptied, four times the sets) each time a set
// full of current entries has to give one up, up to kMaxSets: most processes repeat a few call
// paths, and a phone's every-process session has hundreds of them.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "unwinder/dwarf_unwinder.h"
#include "unwinder/registers.h"
#include "unwinder/stack_memory.h"

namespace droidheap {

class UnwoundStackCache {
 public:
  // Unwinds that read more initial registers than this are not kept (they read a few: pc, sp, the
  // frame pointer, arm's link register).
  static constexpr size_t kMaxInputRegisters = 8;

  struct Entry {
    bool used = false;
    uint64_t maps_generation = 0;
    uint64_t pc = 0;
    uint64_t sp = 0;
    uint64_t stack_top = 0;
    uint8_t register_count = 0;
    uint8_t register_numbers[kMaxInputRegisters];
    uint64_t register_values[kMaxInputRegisters];
    std::vector<WordRead> words;
    uint64_t last_used = 0;
    // The result.
    uint32_t callstack = 0;
    UnwindError error = UnwindError::kNone;
    std::vector<uint64_t> logged_pcs;  // the booked pcs, when the worker logs stacks
    // Its id in the client's stack matches once published there (UnwindingWorker::PublishMatch).
    uint64_t published = kNotPublished;
  };
  static constexpr uint64_t kNotPublished = UINT64_MAX;

  // The entry `regs` (the record's, by DWARF number), `stack_top` and `memory` repeat the inputs
  // of, unwound with the maps of `maps_generation`; nullptr when there is none.
  Entry* Find(const RegisterLayout& layout, const uint64_t* regs, uint64_t stack_top,
              const StackMemory& memory, uint64_t maps_generation);

  // Keeps the result of unwinding `regs` with the maps of `maps_generation`, when `inputs` say
  // what it used in full. Returns the entry to fill in with the result (callstack, error,
  // logged_pcs), or nullptr when it is not kept.
  Entry* Keep(const RegisterLayout& layout, const uint64_t* regs, uint64_t stack_top,
              uint64_t maps_generation, const UnwindInputs& inputs);

  uint64_t hits() const { return hits_; }
  // What the entries take, for the session's memory cap.
  size_t memory_bytes() const;

 private:
  static constexpr size_t kMinSets = 16;
  static constexpr size_t kMaxSets = 256;
  static constexpr size_t kWays = 4;

  Entry* SetOf(uint64_t pc, uint64_t sp, uint64_t stack_top);
  // An entry of `set` that holds nothing current; nullptr when all do.
  static Entry* FreeEntry(Entry* set, uint64_t maps_generation);

  std::vector<Entry> entries_;  // sets * kWays once anything is kept
  uint64_t clock_ = 0;
  uint64_t hits_ = 0;
};

}  // namespace droidheap

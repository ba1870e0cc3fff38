// Unwinds a sampled allocation's stack out of process with DWARF call-frame information, falling
// back to the frame-pointer chain where no CFI covers a pc. Memory comes from the raw stack copy
// where it covers an address and from the target's /proc/pid/mem elsewhere (StackMemory); code
// addresses are resolved through the target's maps, re-read once per stack when a pc falls outside
// them.
//
// Owned by one unwinding worker (not thread-safe). It keeps, across stacks, the parsed unwind
// tables of every file it has seen (ElfCache) and a per-pc cache of CFI rows: repeated stacks cost
// a hash lookup per frame. Each stack is unwound for the ABI its process runs (registers.h), which
// need not be the daemon's own: 32-bit stacks are read in 4-byte words, in 32-bit ELF files.
// armeabi-v7a code without DWARF CFI is unwound with its file's ARM EHABI table (.ARM.exidx,
// arm_exidx.h), then, where that has no entry for a pc or says it cannot be unwound, with r7 frame
// pointers; a function that cannot be unwound and has no frame record ends the stack.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "unwinder/arm_exidx.h"
#include "unwinder/dwarf_cfi.h"
#include "unwinder/elf_info.h"
#include "unwinder/process_maps.h"
#include "unwinder/registers.h"
#include "unwinder/stack_memory.h"

namespace droidheap {

enum class UnwindError : uint32_t {
  kNone = 0,
  kMemoryInvalid = 1,  // a saved register or frame record could not be read
  kMaxFrames = 2,      // the stack was deeper than the limit
  kBadFrameChain = 3,  // frame pointers (or CFA) did not move up the stack
  kNoUnwindInfo = 4,   // no CFI covers the pc and no frame pointer leads on
  kInvalidCfi = 5,     // a CFA or register rule could not be evaluated
  kInvalidPc = 6,      // the pc is in no mapping: nothing can execute there
  kInvalidEhabi = 7,   // an .ARM.exidx/.ARM.extab entry could not be read or executed
};

struct UnwindResult {
  std::vector<uint64_t> pcs;  // innermost first; pcs[0] is the sampled pc, the rest return addresses
  // The map entry each pc was found in (a return address looked up one byte back, in its call);
  // nullptr, or missing at the end, where none was. Valid until the maps are read again.
  std::vector<const MapEntry*> maps;
  UnwindError error = UnwindError::kNone;
  bool maps_reloaded = false;  // a pc was outside the known maps, so they were read again
};

// What an unwind's result depended on besides the maps, for UnwoundStackCache: the initial
// registers it used (bit r: register r) and the words of the stack copy it used, as indices into
// `words` (every word it read there, in order: StackMemory::RecordReads). A word restored into a
// register that no later step reads (a callee-saved register of the program's) was read but not
// used. Another stack that holds the same there unwinds alike. `complete` is false where the
// unwind took a path this does not follow (CFI rules beyond offsets, expressions, EHABI, the maps
// reloaded): it may then have used more.
struct UnwindInputs {
  bool complete = true;
  uint64_t registers = 0;
  std::vector<WordRead> words;
  std::vector<uint32_t> used_words;

  // While unwinding: where each register's current value came from.
  static constexpr int32_t kInitial = -1;
  static constexpr int32_t kComputed = -2;  // from registers already used (the CFA)
  int32_t sources[kMaxRegisters];

  void Begin() {
    complete = true;
    registers = 0;
    words.clear();
    used_words.clear();
    for (int32_t& source : sources) source = kInitial;
  }
  // The step about to be taken uses register `reg`'s value.
  void Use(uint32_t reg) {
    if (reg >= static_cast<uint32_t>(kMaxRegisters)) return;  // the step fails on the row alone
    const int32_t source = sources[reg];
    if (source == kInitial) registers |= uint64_t{1} << reg;
    if (source >= 0) used_words.push_back(static_cast<uint32_t>(source));
  }
  void Set(uint32_t reg, int32_t source) {
    if (reg < static_cast<uint32_t>(kMaxRegisters)) sources[reg] = source;
  }
};

class DwarfUnwinder {
 public:
  struct Stats {
    uint64_t cfi_frames = 0;  // caller frames recovered with CFI
    uint64_t ehabi_frames = 0;  // ... with ARM EHABI tables
    uint64_t ehabi_ends = 0;    // stacks ended by an EHABI entry that cannot be unwound
    uint64_t fp_frames = 0;   // ... with the frame-pointer fallback
    uint64_t frame_hits = 0;  // pcs found where they were last found (FrameHit)
    uint64_t row_cache_hits = 0;
    uint64_t row_cache_misses = 0;
  };

  explicit DwarfUnwinder(ElfCache* elf_cache) : elf_cache_(elf_cache) {}

  // Unwinds from `regs` (`layout`'s registers, indexed by DWARF register number; sp, pc and the
  // callee-saved registers must hold the values at the sampled point). `stack_top` (0 = unknown)
  // is the end of the thread's stack when the copy reached it. `maps_fd` (-1 = none) is re-read
  // when a pc is outside every known mapping. On failure the frames found so far are kept and
  // `error` says why. With `inputs` (whose words `memory` records), notes what the result used.
  void Unwind(const RegisterLayout& layout, const uint64_t* regs, uint64_t stack_top,
              const StackMemory& memory, ProcessMaps* maps, int maps_fd, size_t max_frames,
              UnwindResult* result, UnwindInputs* inputs = nullptr);

  const Stats& stats() const { return stats_; }

 private:
  // A CFI row reduced to the rules that change something; the rules live in rule_pool_.
  struct CachedRow {
    bool found = false;  // false: no CFI covers the pc (the frame-pointer fallback applies)
    bool signal_frame = false;
    // Every rule reads only the CFA and memory (offset rules, undefined ones): the step may write
    // its results straight into the registers. Nearly every row compilers emit.
    bool in_place = false;
    bool return_address_undefined = false;  // the outermost frame
    uint8_t rule_count = 0;
    uint32_t first_rule = 0;
    uint32_t return_address_register = 0;
    CfaRule cfa;
  };
  struct PooledRule {
    uint32_t reg;
    RegisterRule rule;
  };
  struct RowKey {
    const CfiTable* table;
    uint64_t elf_pc;
    bool operator==(const RowKey& other) const {
      return table == other.table && elf_pc == other.elf_pc;
    }
  };
  struct RowKeyHash {
    size_t operator()(const RowKey& key) const {
      return static_cast<size_t>((key.elf_pc * 0x9e3779b97f4a7c15ull) ^
                                 reinterpret_cast<uintptr_t>(key.table));
    }
  };
  enum class Step { kNext, kEnd, kFailed };
  // Unwind's frames, once the caches are known to hold.
  void UnwindFrames(const RegisterLayout& layout, const uint64_t* regs, uint64_t stack_top,
                    const StackMemory& memory, ProcessMaps* maps, int maps_fd, size_t max_frames,
                    UnwindResult* result, UnwindInputs* inputs);
  // Empties the row cache and the frame hits that point into it.
  void ForgetRows();
  // Notes in `inputs` what the step about to be taken uses and where the registers it sets come
  // from. Follows StepInPlace and StepWithFramePointer; any other step leaves the inputs
  // incomplete.
  void NoteStep(const RegisterLayout& layout, const CachedRow* row, bool frame_pointer,
                UnwindInputs* inputs) const;
  // Where the frames of a pc were last found: its map entry and its row, or no row (no CFI) and
  // its EHABI entry (kNotCovered unless the file has an EHABI table).
  // Direct-mapped by pc, so that the pcs every sample repeats (the profiler's own frames, the
  // hot call paths) skip both the map search and the row cache's hash table. Checked against
  // the maps' generation; emptied with the row cache.
  struct FrameHit {
    uint64_t generation = 0;  // ProcessMaps::generation(): none is 0
    uint64_t pc = 0;
    const MapEntry* map = nullptr;
    const CachedRow* row = nullptr;
    ArmExidxEntry ehabi;
  };
  static constexpr int kFrameHitsLog2 = 12;

  // The map entry holding `pc` (false when none does) and its row, nullptr without CFI for it;
  // then its EHABI entry, kNotCovered unless the file has such a table.
  bool Locate(ProcessMaps* maps, uint64_t pc, const MapEntry** map, const CachedRow** row,
              ArmExidxEntry* ehabi);
  const CachedRow& FindRow(const CfiTable* table, uint64_t elf_pc);
  Step StepWithCfi(const RegisterLayout& layout, const CachedRow& row, const StackMemory& memory,
                   uint64_t* regs, UnwindError* error);
  Step StepInPlace(const RegisterLayout& layout, const CachedRow& row, uint64_t cfa,
                   const StackMemory& memory, uint64_t* regs, UnwindError* error);
  Step StepWithEhabi(const RegisterLayout& layout, const ArmExidxEntry& entry,
                     uint64_t stack_top, const StackMemory& memory, uint64_t* regs,
                     UnwindError* error);
  Step StepCannotUnwind(const RegisterLayout& layout, uint64_t stack_top,
                        const StackMemory& memory, uint64_t* regs, UnwindError* error);
  Step StepWithFramePointer(const RegisterLayout& layout, uint64_t stack_top,
                            const StackMemory& memory, uint64_t* regs, UnwindError* error);

  ElfCache* elf_cache_;
  uint64_t elf_generation_ = 0;  // of the tables the rows were found in
  Stats stats_;
  std::unordered_map<RowKey, CachedRow, RowKeyHash> row_cache_;
  std::vector<PooledRule> rule_pool_;  // cleared with row_cache_
  std::vector<FrameHit> frame_hits_ = std::vector<FrameHit>(size_t{1} << kFrameHitsLog2);
};

}  // namespace droidheap

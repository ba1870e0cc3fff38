#include "unwinder/dwarf_unwinder.h"

#include "unwinder/arm_unwind_program.h"

#include <string.h>

#include <algorithm>

namespace droidheap {
namespace {

// Distinct pcs seen by one worker stay far below this in practice; the bound only keeps a
// pathological client (JIT churn, garbage pcs) from growing the cache without end.
constexpr size_t kMaxCachedRows = size_t{1} << 15;

// Expressions read the registers being unwound and the target's memory.
class FrameContext : public ExpressionContext {
 public:
  FrameContext(const RegisterLayout& layout, const uint64_t* regs, const StackMemory& memory)
      : layout_(layout), regs_(regs), memory_(memory) {}
  uint32_t AddressSize() const override { return layout_.word_size; }
  bool ReadRegister(uint32_t reg, uint64_t* value) const override {
    if (reg >= static_cast<uint32_t>(kMaxRegisters)) return false;
    *value = regs_[reg];
    return true;
  }
  bool ReadMemory(uint64_t address, uint64_t* value) const override {
    return memory_.ReadWord(address, layout_.word_size, value);
  }

 private:
  const RegisterLayout& layout_;
  const uint64_t* regs_;
  const StackMemory& memory_;
};

}  // namespace

const DwarfUnwinder::CachedRow& DwarfUnwinder::FindRow(const CfiTable* table, uint64_t elf_pc) {
  RowKey key{table, elf_pc};
  auto it = row_cache_.find(key);
  if (it != row_cache_.end()) {
    ++stats_.row_cache_hits;
    return it->second;
  }
  ++stats_.row_cache_misses;
  if (row_cache_.size() >= kMaxCachedRows) {
    ForgetRows();
  }
  CachedRow cached;
  CfiRow row;
  if (table->FindRow(elf_pc, &row)) {
    cached.found = true;
    cached.signal_frame = row.signal_frame;
    cached.return_address_register = row.return_address_register;
    cached.cfa = row.cfa;
    cached.first_rule = static_cast<uint32_t>(rule_pool_.size());
    cached.in_place = true;
    for (int reg = 0; reg < kMaxRegisters; ++reg) {
      RuleKind kind = row.regs[reg].kind;
      if (kind == RuleKind::kUnspecified || kind == RuleKind::kSameValue) continue;
      rule_pool_.push_back({static_cast<uint32_t>(reg), row.regs[reg]});
      ++cached.rule_count;
      cached.in_place = cached.in_place && (kind == RuleKind::kOffset ||
                                            kind == RuleKind::kValOffset ||
                                            kind == RuleKind::kUndefined);
      if (kind == RuleKind::kUndefined &&
          static_cast<uint32_t>(reg) == row.return_address_register) {
        cached.return_address_undefined = true;
      }
    }
  }
  return row_cache_.emplace(key, cached).first->second;
}

bool DwarfUnwinder::Locate(ProcessMaps* maps, uint64_t pc, const MapEntry** map,
                           const CachedRow** row, ArmExidxEntry* ehabi) {
  FrameHit& hit =
      frame_hits_[static_cast<size_t>((pc * 0x9e3779b97f4a7c15ull) >> (64 - kFrameHitsLog2))];
  if (hit.pc == pc && hit.generation == maps->generation()) {
    *map = hit.map;
    *row = hit.row;
    *ehabi = hit.ehabi;
    ++stats_.frame_hits;
    return true;
  }
  *map = maps->Find(pc, elf_cache_);
  if (*map == nullptr) return false;
  *row = nullptr;
  *ehabi = ArmExidxEntry();
  const uint64_t elf_pc = (*map)->RelPc(pc);
  if ((*map)->cfi != nullptr) {
    const CachedRow& found = FindRow((*map)->cfi, elf_pc);
    if (found.found) *row = &found;
  }
  // DWARF CFI first: a file with both (hand-written assembly given .cfi directives) describes
  // its code at least as precisely there.
  if (*row == nullptr && (*map)->exidx != nullptr) *ehabi = (*map)->exidx->Find(elf_pc);
  hit = {maps->generation(), pc, *map, *row, *ehabi};  // after FindRow, which may empty frame_hits_
  return true;
}

DwarfUnwinder::Step DwarfUnwinder::StepWithCfi(const RegisterLayout& layout, const CachedRow& row,
                                               const StackMemory& memory, uint64_t* regs,
                                               UnwindError* error) {
  FrameContext context(layout, regs, memory);
  uint64_t cfa = 0;
  if (row.cfa.is_expression) {
    if (!EvaluateExpression(row.cfa.expression, row.cfa.expression_size, context, false, 0, &cfa)) {
      *error = UnwindError::kInvalidCfi;
      return Step::kFailed;
    }
  } else {
    if (row.cfa.reg >= static_cast<uint32_t>(kMaxRegisters)) {
      *error = UnwindError::kInvalidCfi;
      return Step::kFailed;
    }
    cfa = layout.Wrap(regs[row.cfa.reg] + static_cast<uint64_t>(row.cfa.offset));
  }
  if (row.return_address_register >= static_cast<uint32_t>(kMaxRegisters)) {
    *error = UnwindError::kInvalidCfi;
    return Step::kFailed;
  }
  if (row.in_place) return StepInPlace(layout, row, cfa, memory, regs, error);

  // The caller's registers: the callee's unless a rule says otherwise, and its sp is the CFA by
  // definition. Rules read the callee's values, so the rules' results are gathered first and
  // written over `regs` only once every rule has been evaluated (a row has a few rules; copying
  // the whole register file twice per frame cost more than the rules themselves).
  struct NewValue {
    uint32_t reg;
    uint64_t value;
  };
  NewValue new_values[kMaxRegisters + 1];
  size_t new_count = 0;
  const uint32_t sp = static_cast<uint32_t>(layout.sp);
  new_values[new_count++] = {sp, cfa};
  uint64_t return_address = regs[row.return_address_register];
  bool return_address_undefined = false;
  for (uint32_t i = row.first_rule; i < row.first_rule + row.rule_count; ++i) {
    uint32_t reg = rule_pool_[i].reg;
    const RegisterRule& rule = rule_pool_[i].rule;
    uint64_t address = 0;
    uint64_t value = 0;
    bool ok = true;
    switch (rule.kind) {
      case RuleKind::kUndefined:
        if (reg == row.return_address_register) {
          return_address_undefined = true;
        }
        continue;
      case RuleKind::kUnspecified:
      case RuleKind::kSameValue:
        continue;
      case RuleKind::kOffset:
        ok = memory.ReadWord(layout.Wrap(cfa + static_cast<uint64_t>(rule.value)),
                             layout.word_size, &value);
        if (!ok) *error = UnwindError::kMemoryInvalid;
        break;
      case RuleKind::kValOffset:
        value = layout.Wrap(cfa + static_cast<uint64_t>(rule.value));
        break;
      case RuleKind::kRegister:
        ok = rule.value >= 0 && rule.value < kMaxRegisters;
        if (ok) value = regs[rule.value];
        break;
      case RuleKind::kExpression:
        ok = EvaluateExpression(rule.expression, rule.expression_size, context, true, cfa,
                                &address) &&
             memory.ReadWord(address, layout.word_size, &value);
        break;
      case RuleKind::kValExpression:
        ok = EvaluateExpression(rule.expression, rule.expression_size, context, true, cfa,
                                &value);
        break;
    }
    if (!ok) {
      if (*error == UnwindError::kNone) *error = UnwindError::kInvalidCfi;
      return Step::kFailed;
    }
    new_values[new_count++] = {reg, value};
    if (reg == row.return_address_register) return_address = value;
  }
  // An undefined return address marks the outermost frame (_start, a thread's start routine).
  if (return_address_undefined) return Step::kEnd;
  return_address = NormalizePc(layout, return_address);
  if (return_address == 0) return Step::kEnd;
  uint64_t caller_sp = cfa;
  for (size_t i = 1; i < new_count; ++i) {
    if (new_values[i].reg == sp) caller_sp = new_values[i].value;
  }
  // Stacks grow down: a caller's frame never lies below its callee's, except across a signal
  // frame (an alternate signal stack may sit anywhere).
  if (!row.signal_frame && caller_sp < regs[layout.sp]) {
    *error = UnwindError::kBadFrameChain;
    return Step::kFailed;
  }
  for (size_t i = 0; i < new_count; ++i) regs[new_values[i].reg] = new_values[i].value;
  regs[layout.pc] = return_address;
  ++stats_.cfi_frames;
  return Step::kNext;
}

// StepWithCfi for a row whose rules read only the CFA and memory: as no rule reads a register the
// step changes, each result goes straight into `regs` (on failure the unwind ends there, so a
// half-written file does not matter).
DwarfUnwinder::Step DwarfUnwinder::StepInPlace(const RegisterLayout& layout, const CachedRow& row,
                                               uint64_t cfa, const StackMemory& memory,
                                               uint64_t* regs, UnwindError* error) {
  // An undefined return address marks the outermost frame (_start, a thread's start routine).
  if (row.return_address_undefined) return Step::kEnd;
  const uint64_t callee_sp = regs[layout.sp];
  regs[layout.sp] = cfa;  // by definition, unless a rule says otherwise
  // Locals: the compiler cannot know that writing `regs` leaves the rules and the layout alone.
  const PooledRule* rule = rule_pool_.data() + row.first_rule;
  const PooledRule* const end = rule + row.rule_count;
  const uint32_t word_size = layout.word_size;
  for (; rule != end; ++rule) {
    const uint64_t address = layout.Wrap(cfa + static_cast<uint64_t>(rule->rule.value));
    if (rule->rule.kind == RuleKind::kOffset) {
      uint64_t value;
      if (!memory.ReadWord(address, word_size, &value)) {
        *error = UnwindError::kMemoryInvalid;
        return Step::kFailed;
      }
      regs[rule->reg] = value;
    } else if (rule->rule.kind == RuleKind::kValOffset) {
      regs[rule->reg] = address;
    }  // else undefined: the callee's value stays, as in StepWithCfi
  }
  const uint64_t return_address = NormalizePc(layout, regs[row.return_address_register]);
  if (return_address == 0) return Step::kEnd;
  // Stacks grow down: a caller's frame never lies below its callee's, except across a signal
  // frame (an alternate signal stack may sit anywhere).
  if (!row.signal_frame && regs[layout.sp] < callee_sp) {
    *error = UnwindError::kBadFrameChain;
    return Step::kFailed;
  }
  regs[layout.pc] = return_address;
  ++stats_.cfi_frames;
  return Step::kNext;
}

// A function that says it cannot be unwound (EXIDX_CANTUNWIND, the "refuse to unwind"
// instruction) may still have a frame record (clang marks C functions compiled without
// -funwind-tables so): the frame-pointer fallback follows one. Without one the stack ends there,
// as the table says, and not as an error: the outermost frames are marked so (the start files'
// _start_main, which calls __libc_init).
DwarfUnwinder::Step DwarfUnwinder::StepCannotUnwind(const RegisterLayout& layout,
                                                    uint64_t stack_top, const StackMemory& memory,
                                                    uint64_t* regs, UnwindError* error) {
  Step step = StepWithFramePointer(layout, stack_top, memory, regs, error);
  if (step == Step::kFailed && *error == UnwindError::kNoUnwindInfo) {
    *error = UnwindError::kNone;
    ++stats_.ehabi_ends;
    return Step::kEnd;
  }
  return step;
}

// An EHABI entry's instructions restore the caller's registers from the stack; r13 becomes the
// final vsp and r15 the popped pc, or lr when none is popped.
DwarfUnwinder::Step DwarfUnwinder::StepWithEhabi(const RegisterLayout& layout,
                                                 const ArmExidxEntry& entry, uint64_t stack_top,
                                                 const StackMemory& memory, uint64_t* regs,
                                                 UnwindError* error) {
  if (entry.status == ArmExidxStatus::kMalformed) {
    *error = UnwindError::kInvalidEhabi;
    return Step::kFailed;
  }
  if (entry.status == ArmExidxStatus::kCantUnwind) {
    return StepCannotUnwind(layout, stack_top, memory, regs, error);
  }
  const uint64_t callee_sp = regs[layout.sp];
  const uint64_t callee_pc = regs[layout.pc];
  switch (ExecuteArmUnwind(entry.bytes, memory, regs)) {
    case ArmUnwindOutcome::kDone:
      break;
    case ArmUnwindOutcome::kRefused:  // `regs` are untouched
      return StepCannotUnwind(layout, stack_top, memory, regs, error);
    case ArmUnwindOutcome::kMemoryInvalid:
      *error = UnwindError::kMemoryInvalid;
      return Step::kFailed;
    case ArmUnwindOutcome::kMalformed:
      *error = UnwindError::kInvalidEhabi;
      return Step::kFailed;
  }
  const uint64_t return_address = NormalizePc(layout, regs[layout.pc]);
  if (return_address == 0) return Step::kEnd;
  // Stacks grow down; and a frame that moves neither sp nor pc (a leaf's entry applied to a
  // caller, whose lr is stale) would repeat itself up to the frame limit.
  if (regs[layout.sp] < callee_sp ||
      (regs[layout.sp] == callee_sp && return_address == callee_pc)) {
    *error = UnwindError::kBadFrameChain;
    return Step::kFailed;
  }
  regs[layout.pc] = return_address;
  ++stats_.ehabi_frames;
  return Step::kNext;
}

// A frame record is two words at the frame pointer, the caller's frame pointer then the return
// address, on every ABI here: x86's push ebp/rbp after the call, arm64's stp x29, x30, and
// armeabi-v7a Thumb-2's push {r7, lr} as clang emits them.
DwarfUnwinder::Step DwarfUnwinder::StepWithFramePointer(const RegisterLayout& layout,
                                                        uint64_t stack_top,
                                                        const StackMemory& memory, uint64_t* regs,
                                                        UnwindError* error) {
  const uint64_t word = layout.word_size;
  uint64_t fp = regs[layout.fp];
  // The frame record must lie on the stack above sp; anything else is not a frame pointer (code
  // without one uses the register for data).
  bool on_stack = fp != 0 && fp % word == 0 && fp >= regs[layout.sp] &&
                  layout.Wrap(fp + 2 * word) > fp &&
                  (stack_top == 0 || fp + 2 * word <= stack_top);
  if (!on_stack) {
    *error = UnwindError::kNoUnwindInfo;
    return Step::kFailed;
  }
  uint64_t caller_fp = 0;
  uint64_t return_address = 0;
  if (!memory.ReadWord(fp, layout.word_size, &caller_fp) ||
      !memory.ReadWord(fp + word, layout.word_size, &return_address)) {
    *error = UnwindError::kMemoryInvalid;
    return Step::kFailed;
  }
  return_address = NormalizePc(layout, return_address);
  if (return_address == 0) return Step::kEnd;
  regs[layout.fp] = caller_fp;
  regs[layout.sp] = fp + 2 * word;
  regs[layout.pc] = return_address;
  ++stats_.fp_frames;
  return Step::kNext;
}

void DwarfUnwinder::NoteStep(const RegisterLayout& layout, const CachedRow* row,
                            bool frame_pointer, UnwindInputs* inputs) const {
  const uint32_t sp = static_cast<uint32_t>(layout.sp);
  const uint32_t pc = static_cast<uint32_t>(layout.pc);
  // The words this step reads from the copy get the next indices, in the order it reads them.
  int32_t word = static_cast<int32_t>(inputs->words.size());
  if (row != nullptr && row->in_place && !row->cfa.is_expression) {
    // StepWithCfi's CFA, then StepInPlace: the callee's sp, sp := CFA, each rule in order (an
    // offset rule reads a word at the CFA), the return address.
    inputs->Use(row->cfa.reg);
    inputs->Use(sp);
    inputs->Set(sp, UnwindInputs::kComputed);
    for (uint32_t i = row->first_rule; i < row->first_rule + row->rule_count; ++i) {
      const RuleKind kind = rule_pool_[i].rule.kind;
      if (kind == RuleKind::kOffset) inputs->Set(rule_pool_[i].reg, word++);
      if (kind == RuleKind::kValOffset) inputs->Set(rule_pool_[i].reg, UnwindInputs::kComputed);
    }
    inputs->Use(row->return_address_register);
    inputs->Set(pc, UnwindInputs::kComputed);
  } else if (row == nullptr && frame_pointer) {
    // StepWithFramePointer: the frame record at fp, the caller's fp then the return address.
    const uint32_t fp = static_cast<uint32_t>(layout.fp);
    inputs->Use(fp);
    inputs->Use(sp);
    inputs->Set(fp, word);
    inputs->Set(pc, word + 1);
    inputs->Use(pc);
    inputs->Set(pc, UnwindInputs::kComputed);
    inputs->Set(sp, UnwindInputs::kComputed);
  } else {
    inputs->complete = false;
  }
}

void DwarfUnwinder::ForgetRows() {
  row_cache_.clear();
  rule_pool_.clear();
  std::fill(frame_hits_.begin(), frame_hits_.end(), FrameHit{});
}

void DwarfUnwinder::Unwind(const RegisterLayout& layout, const uint64_t* initial_regs,
                           uint64_t stack_top, const StackMemory& memory, ProcessMaps* maps,
                           int maps_fd, size_t max_frames, UnwindResult* result,
                           UnwindInputs* inputs) {
  result->pcs.clear();
  result->maps.clear();
  result->error = UnwindError::kNone;
  result->maps_reloaded = false;
  // The rows and frame hits point into the ElfCache's tables, which it may drop here.
  elf_cache_->BeginUnwind();
  if (elf_cache_->generation() != elf_generation_) {
    elf_generation_ = elf_cache_->generation();
    ForgetRows();
  }
  UnwindFrames(layout, initial_regs, stack_top, memory, maps, maps_fd, max_frames, result, inputs);
  // A stack unwound without tables that were put off unwinds otherwise once they are read.
  if (inputs != nullptr && elf_cache_->deferred()) inputs->complete = false;
}

void DwarfUnwinder::UnwindFrames(const RegisterLayout& layout, const uint64_t* initial_regs,
                                 uint64_t stack_top, const StackMemory& memory,
                                 ProcessMaps* maps, int maps_fd, size_t max_frames,
                                 UnwindResult* result, UnwindInputs* inputs) {
  uint64_t regs[kMaxRegisters];
  // A 32-bit process's registers are 32 bits wide, whatever a record's upper halves say.
  if (layout.word_size == 8) {
    memcpy(regs, initial_regs, sizeof(regs));
  } else {
    for (int i = 0; i < kMaxRegisters; ++i) regs[i] = layout.Wrap(initial_regs[i]);
  }
  regs[layout.pc] = NormalizePc(layout, regs[layout.pc]);
  result->pcs.push_back(regs[layout.pc]);
  if (inputs != nullptr) {
    inputs->Begin();
    inputs->Use(static_cast<uint32_t>(layout.pc));
  }

  // The sampled pc is exact; every later one is a return address, looked up one byte back so that
  // a call at the very end of a function finds that function's row. Across a signal frame the
  // next pc is exact again (the interrupted instruction).
  bool pc_is_return_address = false;
  for (;;) {
    if (result->pcs.size() >= max_frames) {
      result->error = UnwindError::kMaxFrames;
      return;
    }
    uint64_t pc = regs[layout.pc];
    uint64_t lookup_pc = pc_is_return_address ? pc - 1 : pc;
    const MapEntry* map = nullptr;
    const CachedRow* row = nullptr;
    ArmExidxEntry ehabi;
    bool located = Locate(maps, lookup_pc, &map, &row, &ehabi);
    if (!located && !result->maps_reloaded && maps_fd >= 0) {
      // A library loaded since the maps were read. The entries found so far are gone with them.
      result->maps_reloaded = true;
      if (inputs != nullptr) inputs->complete = false;
      maps->Reload(maps_fd);
      std::fill(result->maps.begin(), result->maps.end(), nullptr);
      located = Locate(maps, lookup_pc, &map, &row, &ehabi);
    }
    if (!located) {
      result->error = UnwindError::kInvalidPc;
      return;
    }
    result->maps.push_back(map);
    const bool with_ehabi = layout.has_ehabi && ehabi.status != ArmExidxStatus::kNotCovered;
    if (inputs != nullptr && inputs->complete) {
      NoteStep(layout, row, !with_ehabi, inputs);
    }
    Step step;
    if (row != nullptr) {
      step = StepWithCfi(layout, *row, memory, regs, &result->error);
    } else if (with_ehabi) {
      step = StepWithEhabi(layout, ehabi, stack_top, memory, regs, &result->error);
    } else {
      step = StepWithFramePointer(layout, stack_top, memory, regs, &result->error);
    }
    bool signal_frame = row != nullptr && row->signal_frame;
    if (step != Step::kNext) return;
    pc_is_return_address = !signal_frame;
    result->pcs.push_back(regs[layout.pc]);
  }
}

}  // namespace droidheap

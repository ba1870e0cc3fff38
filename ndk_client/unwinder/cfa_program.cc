#include "unwinder/cfa_program.h"

#include <string.h>

#include <type_traits>

namespace droidheap {
namespace cfi {
namespace {

// Real programs use a handful of instructions per location and nest remember_state once or
// twice; these only cap the work a hostile file can cause.
constexpr uint32_t kMaxInstructions = 1 << 17;
constexpr uint32_t kMaxStateDepth = 16;

// What DW_CFA_remember_state saves. The CFA rule is included, as GCC and LLVM expect: they emit
// remember_state before an epilogue and restore_state after it to get the body's CFA back.
struct RuleSet {
  CfaRule cfa;
  bool cfa_defined;
  RegisterRule regs[kMaxRegisters];
};
static_assert(std::is_trivially_copyable<RuleSet>::value, "saved with memcpy");

class CfaInterpreter {
 public:
  CfaInterpreter(const CfiSectionView& section, bool debug_frame, const Cie& cie, const Fde& fde,
                 uint64_t pc, CfiRow* row)
      : section_(section), debug_frame_(debug_frame), cie_(cie), fde_(fde), pc_(pc), row_(row) {}

  // Runs [begin, end) of the section. In a CIE, location instructions are invalid and restore
  // has no initial rules to go back to.
  bool Run(uint64_t begin, uint64_t end, bool in_cie);
  bool cfa_defined() const { return cfa_defined_; }
  void SaveInitialRules() { memcpy(initial_, row_->regs, sizeof(initial_)); }

 private:
  RegisterRule* Reg(uint64_t reg) { return reg < kMaxRegisters ? &row_->regs[reg] : &dropped_; }
  int64_t Factored(int64_t value) const {
    // Wrapping, not undefined, on absurd factors: such a rule is wrong but harmless.
    return static_cast<int64_t>(static_cast<uint64_t>(value) *
                                static_cast<uint64_t>(cie_.data_alignment));
  }
  void SetRule(uint64_t reg, RuleKind kind, int64_t value) {
    RegisterRule* rule = Reg(reg);
    *rule = RegisterRule();
    rule->kind = kind;
    rule->value = value;
  }
  void Restore(uint64_t reg, bool in_cie) {
    if (reg < kMaxRegisters) row_->regs[reg] = in_cie ? RegisterRule() : initial_[reg];
  }
  bool DefineCfaRegister(uint64_t reg) {
    if (reg >= kMaxRegisters) return false;  // the unwinder indexes its registers with it
    row_->cfa.is_expression = false;
    row_->cfa.expression = nullptr;
    row_->cfa.expression_size = 0;
    row_->cfa.reg = static_cast<uint32_t>(reg);
    cfa_defined_ = true;
    return true;
  }
  // Moves to `location`; stops the program once it passes the pc.
  void MoveTo(uint64_t location) {
    if (location > pc_) {
      row_->pc_end = location < fde_.pc_end ? location : fde_.pc_end;
      done_ = true;
      return;
    }
    row_->pc_begin = location > fde_.pc_begin ? location : fde_.pc_begin;
    location_ = location;
  }
  void Advance(uint64_t delta) {
    uint64_t bytes, location;
    if (__builtin_mul_overflow(delta, cie_.code_alignment, &bytes) ||
        __builtin_add_overflow(location_, bytes, &location)) {
      location = ~uint64_t{0};  // past any pc
    }
    MoveTo(location);
  }
  bool Remember();
  bool RestoreState();
  bool Step(ByteReader* reader, bool in_cie);

  const CfiSectionView& section_;
  bool debug_frame_;
  const Cie& cie_;
  const Fde& fde_;
  uint64_t pc_;
  CfiRow* row_;
  uint64_t location_ = fde_.pc_begin;
  bool cfa_defined_ = false;
  bool done_ = false;
  uint32_t instructions_ = 0;
  uint32_t depth_ = 0;
  RegisterRule dropped_;  // where rules for registers >= kMaxRegisters go
  RegisterRule initial_[kMaxRegisters];
  // Raw storage, so that an unused stack costs nothing to set up.
  alignas(RuleSet) unsigned char stack_[kMaxStateDepth * sizeof(RuleSet)];
};

bool CfaInterpreter::Remember() {
  if (depth_ == kMaxStateDepth) return false;
  RuleSet set;
  set.cfa = row_->cfa;
  set.cfa_defined = cfa_defined_;
  memcpy(set.regs, row_->regs, sizeof(set.regs));
  memcpy(stack_ + depth_++ * sizeof(RuleSet), &set, sizeof(set));
  return true;
}

bool CfaInterpreter::RestoreState() {
  if (depth_ == 0) return false;
  RuleSet set;
  memcpy(&set, stack_ + --depth_ * sizeof(RuleSet), sizeof(set));
  row_->cfa = set.cfa;
  cfa_defined_ = set.cfa_defined;
  memcpy(row_->regs, set.regs, sizeof(set.regs));
  return true;
}

bool CfaInterpreter::Run(uint64_t begin, uint64_t end, bool in_cie) {
  ByteReader reader(section_.data, end, begin);
  while (!reader.at_end() && !done_) {
    if (++instructions_ > kMaxInstructions || !Step(&reader, in_cie)) return false;
  }
  return true;
}

bool CfaInterpreter::Step(ByteReader* r, bool in_cie) {
  uint8_t opcode;
  if (!r->ReadU8(&opcode)) return false;
  uint8_t low = opcode & 0x3f;
  uint64_t reg, operand, operand2;
  int64_t signed_operand;
  switch (opcode >> 6) {
    case 1:  // DW_CFA_advance_loc
      if (in_cie) return false;
      Advance(low);
      return true;
    case 2:  // DW_CFA_offset
      if (!r->ReadUleb(&operand)) return false;
      SetRule(low, RuleKind::kOffset, Factored(static_cast<int64_t>(operand)));
      return true;
    case 3:  // DW_CFA_restore
      Restore(low, in_cie);
      return true;
  }
  switch (opcode) {
    case 0x00:  // DW_CFA_nop
      return true;
    case 0x01: {  // DW_CFA_set_loc
      if (in_cie) return false;
      uint64_t location;
      if (debug_frame_) {
        if (!r->ReadUnsigned(cie_.address_size, &location)) return false;
      } else {
        PointerBases bases;
        bases.section_vaddr = section_.vaddr;
        bases.address_size = section_.address_size;
        bases.has_func_base = true;
        bases.func_base = fde_.pc_begin;
        if (!ReadEncodedPointer(r, cie_.fde_encoding, bases, &location)) return false;
      }
      MoveTo(location);
      return true;
    }
    case 0x02:  // DW_CFA_advance_loc1
    case 0x03:  // DW_CFA_advance_loc2
    case 0x04:  // DW_CFA_advance_loc4
      if (in_cie || !r->ReadUnsigned(size_t{1} << (opcode - 0x02), &operand)) return false;
      Advance(operand);
      return true;
    case 0x05:  // DW_CFA_offset_extended
      if (!r->ReadUleb(&reg) || !r->ReadUleb(&operand)) return false;
      SetRule(reg, RuleKind::kOffset, Factored(static_cast<int64_t>(operand)));
      return true;
    case 0x06:  // DW_CFA_restore_extended
      if (!r->ReadUleb(&reg)) return false;
      Restore(reg, in_cie);
      return true;
    case 0x07:  // DW_CFA_undefined
    case 0x08:  // DW_CFA_same_value
      if (!r->ReadUleb(&reg)) return false;
      SetRule(reg, opcode == 0x07 ? RuleKind::kUndefined : RuleKind::kSameValue, 0);
      return true;
    case 0x09:  // DW_CFA_register
      if (!r->ReadUleb(&reg) || !r->ReadUleb(&operand)) return false;
      // A value held in a register we do not track (a vector register) cannot be recovered.
      if (operand >= kMaxRegisters) {
        SetRule(reg, RuleKind::kUndefined, 0);
      } else {
        SetRule(reg, RuleKind::kRegister, static_cast<int64_t>(operand));
      }
      return true;
    case 0x0a:  // DW_CFA_remember_state
      return Remember();
    case 0x0b:  // DW_CFA_restore_state
      return RestoreState();
    case 0x0c:  // DW_CFA_def_cfa
      if (!r->ReadUleb(&reg) || !r->ReadUleb(&operand) || !DefineCfaRegister(reg)) return false;
      row_->cfa.offset = static_cast<int64_t>(operand);
      return true;
    case 0x12:  // DW_CFA_def_cfa_sf
      if (!r->ReadUleb(&reg) || !r->ReadSleb(&signed_operand) || !DefineCfaRegister(reg)) {
        return false;
      }
      row_->cfa.offset = Factored(signed_operand);
      return true;
    case 0x0d:  // DW_CFA_def_cfa_register: only valid over a register+offset rule
      if (!r->ReadUleb(&reg) || !cfa_defined_ || row_->cfa.is_expression) return false;
      return DefineCfaRegister(reg);
    case 0x0e:  // DW_CFA_def_cfa_offset
      if (!r->ReadUleb(&operand) || !cfa_defined_ || row_->cfa.is_expression) return false;
      row_->cfa.offset = static_cast<int64_t>(operand);
      return true;
    case 0x13:  // DW_CFA_def_cfa_offset_sf
      if (!r->ReadSleb(&signed_operand) || !cfa_defined_ || row_->cfa.is_expression) return false;
      row_->cfa.offset = Factored(signed_operand);
      return true;
    case 0x0f: {  // DW_CFA_def_cfa_expression
      const uint8_t* bytes;
      uint32_t size;
      if (!r->ReadBlock(&bytes, &size)) return false;
      row_->cfa = CfaRule();
      row_->cfa.is_expression = true;
      row_->cfa.expression = bytes;
      row_->cfa.expression_size = size;
      cfa_defined_ = true;
      return true;
    }
    case 0x10:    // DW_CFA_expression
    case 0x16: {  // DW_CFA_val_expression
      const uint8_t* bytes;
      uint32_t size;
      if (!r->ReadUleb(&reg) || !r->ReadBlock(&bytes, &size)) return false;
      SetRule(reg, opcode == 0x10 ? RuleKind::kExpression : RuleKind::kValExpression, 0);
      Reg(reg)->expression = bytes;
      Reg(reg)->expression_size = size;
      return true;
    }
    case 0x11:  // DW_CFA_offset_extended_sf
    case 0x15:  // DW_CFA_val_offset_sf
      if (!r->ReadUleb(&reg) || !r->ReadSleb(&signed_operand)) return false;
      SetRule(reg, opcode == 0x11 ? RuleKind::kOffset : RuleKind::kValOffset,
              Factored(signed_operand));
      return true;
    case 0x14:  // DW_CFA_val_offset
      if (!r->ReadUleb(&reg) || !r->ReadUleb(&operand)) return false;
      SetRule(reg, RuleKind::kValOffset, Factored(static_cast<int64_t>(operand)));
      return true;
    case 0x2d:  // DW_CFA_GNU_window_save, on AArch64 DW_CFA_AARCH64_negate_ra_state: the return
                // address is signed from here on; the unwinder strips PAC bits whatever this says.
      return true;
    case 0x2e:  // DW_CFA_GNU_args_size: only matters for landing pads
      return r->ReadUleb(&operand);
    case 0x2f:  // DW_CFA_GNU_negative_offset_extended
      if (!r->ReadUleb(&reg) || !r->ReadUleb(&operand2)) return false;
      SetRule(reg, RuleKind::kOffset,
              static_cast<int64_t>(0 - static_cast<uint64_t>(
                                           Factored(static_cast<int64_t>(operand2)))));
      return true;
    default:
      return false;
  }
}

}  // namespace

bool RunCfaPrograms(const CfiSectionView& section, bool debug_frame, const Cie& cie,
                    const Fde& fde, uint64_t pc, CfiRow* row) {
  row->cfa = CfaRule();
  for (RegisterRule& rule : row->regs) rule = RegisterRule();
  row->pc_begin = fde.pc_begin;
  row->pc_end = fde.pc_end;
  CfaInterpreter interpreter(section, debug_frame, cie, fde, pc, row);
  if (!interpreter.Run(cie.instructions_begin, cie.instructions_end, /*in_cie=*/true)) {
    return false;
  }
  interpreter.SaveInitialRules();
  if (!interpreter.Run(fde.instructions_begin, fde.instructions_end, /*in_cie=*/false)) {
    return false;
  }
  return interpreter.cfa_defined();
}

}  // namespace cfi
}  // namespace droidheap

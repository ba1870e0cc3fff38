#include "unwinder/arm_unwind_program.h"

namespace droidheap {
namespace {

constexpr int kSp = 13;
constexpr int kLr = 14;
constexpr int kPc = 15;

// One execution: a private register file, committed only when the instructions finish cleanly.
class Program {
 public:
  Program(const ArmUnwindBytes& bytes, const StackMemory& memory, const uint64_t* regs)
      : bytes_(bytes), memory_(memory) {
    for (int i = 0; i < 16; ++i) regs_[i] = static_cast<uint32_t>(regs[i]);
    vsp_ = regs_[kSp];
  }

  ArmUnwindOutcome Run(uint64_t* regs) {
    while (next_ < bytes_.count) {
      const uint8_t op = bytes_.At(next_++);
      ArmUnwindOutcome outcome = ArmUnwindOutcome::kDone;
      bool finish = false;
      if (!Execute(op, &outcome, &finish)) return outcome;
      if (finish) break;
    }
    // The caller's sp is where the frame's unwinding left vsp; without a popped pc the function
    // returns through lr, which the instructions restored if the function had saved it.
    regs_[kSp] = vsp_;
    if (!pc_popped_) regs_[kPc] = regs_[kLr];
    for (int i = 0; i < 16; ++i) regs[i] = regs_[i];
    return ArmUnwindOutcome::kDone;
  }

 private:
  bool NextByte(uint8_t* byte) {
    if (next_ >= bytes_.count) return false;
    *byte = bytes_.At(next_++);
    return true;
  }

  // Pops the registers of `mask` (bit n: rn), lowest-numbered from the lowest address. A popped
  // r13 becomes vsp only once the whole instruction is done (EHABI 10.3's one exception to "pop
  // advances vsp").
  bool Pop(uint32_t mask, ArmUnwindOutcome* outcome) {
    uint32_t new_vsp = 0;
    bool sp_popped = false;
    for (int reg = 0; reg < 16; ++reg) {
      if ((mask & (1u << reg)) == 0) continue;
      uint64_t value;
      if (!memory_.ReadWord(vsp_, 4, &value)) {
        *outcome = ArmUnwindOutcome::kMemoryInvalid;
        return false;
      }
      vsp_ += 4;
      if (reg == kSp) {
        new_vsp = static_cast<uint32_t>(value);
        sp_popped = true;
      } else {
        regs_[reg] = static_cast<uint32_t>(value);
      }
      if (reg == kPc) pc_popped_ = true;
    }
    if (sp_popped) vsp_ = new_vsp;
    return true;
  }

  // Registers of the VFP and iWMMX banks are not needed by any later frame's unwinding (nor
  // saved in the register file), only the room they take on the stack.
  bool Skip(uint32_t bytes) {
    vsp_ += bytes;
    return true;
  }

  // "sssscccc": registers first + ssss .. first + ssss + cccc, of a bank of `bank` registers.
  bool RangeFits(uint8_t operand, uint32_t first, uint32_t bank) const {
    return first + (operand >> 4) + (operand & 0xf) < bank;
  }

  // False when execution must stop with `*outcome`; `*finish` for the finish instruction.
  bool Execute(uint8_t op, ArmUnwindOutcome* outcome, bool* finish) {
    *outcome = ArmUnwindOutcome::kMalformed;
    uint8_t operand = 0;
    if ((op & 0xc0) == 0x00) {  // 00xxxxxx: vsp = vsp + (xxxxxx << 2) + 4
      vsp_ += ((op & 0x3fu) << 2) + 4;
      return true;
    }
    if ((op & 0xc0) == 0x40) {  // 01xxxxxx: vsp = vsp - (xxxxxx << 2) - 4
      vsp_ -= ((op & 0x3fu) << 2) + 4;
      return true;
    }
    if ((op & 0xf0) == 0x80) {  // 1000iiii iiiiiiii: pop under mask {r15-r12}, {r11-r4}
      if (!NextByte(&operand)) return false;
      const uint32_t mask = ((op & 0x0fu) << 8) | operand;
      if (mask == 0) {  // 10000000 00000000
        *outcome = ArmUnwindOutcome::kRefused;
        return false;
      }
      return Pop(mask << 4, outcome);
    }
    if ((op & 0xf0) == 0x90) {  // 1001nnnn: vsp = r[nnnn]; nnnn = 13 and 15 are reserved
      const int reg = op & 0x0f;
      if (reg == kSp || reg == kPc) return false;
      vsp_ = regs_[reg];
      return true;
    }
    if ((op & 0xf0) == 0xa0) {  // 1010Lnnn: pop r4-r[4+nnn], and r14 when L
      const uint32_t count = (op & 0x07u) + 1;
      uint32_t mask = ((1u << count) - 1) << 4;
      if (op & 0x08) mask |= 1u << kLr;
      return Pop(mask, outcome);
    }
    switch (op) {
      case 0xb0:  // finish
        *finish = true;
        return true;
      case 0xb1:  // 10110001 0000iiii: pop under mask {r3-r0}; other operands are spare
        if (!NextByte(&operand) || operand == 0 || (operand & 0xf0) != 0) return false;
        return Pop(operand, outcome);
      case 0xb2: {  // 10110010 uleb128: vsp = vsp + 0x204 + (uleb128 << 2)
        uint32_t value = 0;
        for (int shift = 0;; shift += 7) {
          // A 32-bit value fits five groups of seven bits; a longer one is no vsp offset.
          if (shift > 28 || !NextByte(&operand)) return false;
          value |= static_cast<uint32_t>(operand & 0x7f) << shift;
          if ((operand & 0x80) == 0) break;
        }
        vsp_ += 0x204 + (value << 2);
        return true;
      }
      case 0xb3:  // 10110011 sssscccc: d[ssss]-d[ssss+cccc] saved by FSTMFDX (one more word)
        if (!NextByte(&operand) || !RangeFits(operand, 0, 16)) return false;
        return Skip(((operand & 0x0fu) + 1) * 8 + 4);
      case 0xc6:  // 11000110 sssscccc: iWMMX wR[ssss]-wR[ssss+cccc]
        if (!NextByte(&operand) || !RangeFits(operand, 0, 16)) return false;
        return Skip(((operand & 0x0fu) + 1) * 8);
      case 0xc7:  // 11000111 0000iiii: iWMMX wCGR under mask {wCGR3-wCGR0}; others spare
        if (!NextByte(&operand) || operand == 0 || (operand & 0xf0) != 0) return false;
        return Skip(static_cast<uint32_t>(__builtin_popcount(operand)) * 4);
      case 0xc8:  // 11001000 sssscccc: d[16+ssss]-d[16+ssss+cccc] saved by VPUSH
        if (!NextByte(&operand) || !RangeFits(operand, 16, 32)) return false;
        return Skip(((operand & 0x0fu) + 1) * 8);
      case 0xc9:  // 11001001 sssscccc: d[ssss]-d[ssss+cccc] saved by VPUSH
        if (!NextByte(&operand) || !RangeFits(operand, 0, 16)) return false;
        return Skip(((operand & 0x0fu) + 1) * 8);
      default:
        break;
    }
    if ((op & 0xf8) == 0xb8) return Skip(((op & 0x07u) + 1) * 8 + 4);  // d8-d[8+nnn], FSTMFDX
    if ((op & 0xf8) == 0xc0 && op != 0xc6 && op != 0xc7) {              // wR10-wR[10+nnn]
      return Skip(((op & 0x07u) + 1) * 8);
    }
    if ((op & 0xf8) == 0xd0) return Skip(((op & 0x07u) + 1) * 8);  // d8-d[8+nnn], VPUSH
    return false;  // 101101nn, 11001yyy (yyy > 1), 11xxxyyy (xxx > 2): spare
  }

  const ArmUnwindBytes& bytes_;
  const StackMemory& memory_;
  uint32_t regs_[16];
  uint32_t vsp_;
  uint32_t next_ = 0;
  bool pc_popped_ = false;
};

}  // namespace

ArmUnwindOutcome ExecuteArmUnwind(const ArmUnwindBytes& bytes, const StackMemory& memory,
                                  uint64_t* regs) {
  return Program(bytes, memory, regs).Run(regs);
}

}  // namespace droidheap

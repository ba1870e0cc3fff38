// EvaluateExpression: the DWARF expression stack machine (DWARF 5 section 2.5) as call-frame
// information uses it, with the generic (address-sized) type only: 64 bits, or 32 for a 32-bit
// target, whose values are kept zero-extended in the 64-bit stack and wrap at 32 bits.
// Allocation-free and bounded in stack depth and steps, since expressions come from untrusted
// files.
#include <stdint.h>

#include "unwinder/cfi_entries.h"
#include "unwinder/dwarf_cfi.h"

namespace droidheap {
namespace {

constexpr int kMaxStack = 64;
// Branches may loop; real CFI expressions are a dozen operations.
constexpr int kMaxSteps = 1000;

// The generic type: its width, and its values as unsigned (wrapped) and signed numbers.
struct Generic {
  unsigned bits;  // 32 or 64
  uint64_t Wrap(uint64_t v) const { return bits == 64 ? v : v & 0xffffffffu; }
  int64_t Signed(uint64_t v) const {
    return bits == 64 ? static_cast<int64_t>(v) : static_cast<int32_t>(static_cast<uint32_t>(v));
  }
};

// Every value on it is a value of the generic type: wrapped on the way in.
class Stack {
 public:
  explicit Stack(Generic type) : type_(type) {}
  const Generic& type() const { return type_; }
  bool Push(uint64_t v) {
    if (size_ == kMaxStack) return false;
    values_[size_++] = type_.Wrap(v);
    return true;
  }
  bool Pop(uint64_t* v) {
    if (size_ == 0) return false;
    *v = values_[--size_];
    return true;
  }
  // The entry `depth` below the top (0 = top).
  bool Peek(uint64_t depth, uint64_t* v) const {
    if (depth >= static_cast<uint64_t>(size_)) return false;
    *v = values_[size_ - 1 - depth];
    return true;
  }
  int size() const { return size_; }
  uint64_t top() const { return values_[size_ - 1]; }
  void ReplaceTop(uint64_t v) { values_[size_ - 1] = type_.Wrap(v); }

 private:
  Generic type_;
  uint64_t values_[kMaxStack];
  int size_ = 0;
};

// Binary operations: pops the top (b) and the one below (a), pushes a op b.
bool Binary(uint8_t opcode, Stack* stack) {
  const Generic& type = stack->type();
  uint64_t a, b;
  if (!stack->Pop(&b) || !stack->Pop(&a)) return false;
  int64_t sa = type.Signed(a), sb = type.Signed(b);
  uint64_t r;
  switch (opcode) {
    case 0x1a: r = a & b; break;  // DW_OP_and
    case 0x1b:                    // DW_OP_div: signed
      if (b == 0) return false;
      // INT64_MIN / -1 overflows; wrapping it is what the unsigned negation gives.
      r = sb == -1 ? 0 - a : static_cast<uint64_t>(sa / sb);
      break;
    case 0x1c: r = a - b; break;  // DW_OP_minus
    case 0x1d:                    // DW_OP_mod: unsigned for the generic type
      if (b == 0) return false;
      r = a % b;
      break;
    case 0x1e: r = a * b; break;  // DW_OP_mul
    case 0x21: r = a | b; break;  // DW_OP_or
    case 0x22: r = a + b; break;  // DW_OP_plus
    case 0x24: r = b >= type.bits ? 0 : a << b; break;  // DW_OP_shl
    case 0x25: r = b >= type.bits ? 0 : a >> b; break;  // DW_OP_shr
    case 0x26:                                          // DW_OP_shra
      r = static_cast<uint64_t>(sa >> (b >= type.bits - 1 ? type.bits - 1 : b));
      break;
    case 0x27: r = a ^ b; break;  // DW_OP_xor
    // Comparisons are signed for the generic type.
    case 0x29: r = sa == sb; break;  // DW_OP_eq
    case 0x2a: r = sa >= sb; break;  // DW_OP_ge
    case 0x2b: r = sa > sb; break;   // DW_OP_gt
    case 0x2c: r = sa <= sb; break;  // DW_OP_le
    case 0x2d: r = sa < sb; break;   // DW_OP_lt
    case 0x2e: r = sa != sb; break;  // DW_OP_ne
    default: return false;
  }
  return stack->Push(r);
}

// DW_OP_bra and DW_OP_skip: a 2-byte signed offset from the end of the operand, which must land
// inside the expression (or exactly at its end).
bool Jump(cfi::ByteReader* reader) {
  uint64_t raw;
  if (!reader->ReadUnsigned(2, &raw)) return false;
  int64_t target = static_cast<int64_t>(reader->pos()) + static_cast<int16_t>(raw);
  return target >= 0 && reader->SeekTo(static_cast<size_t>(target));
}

bool Step(cfi::ByteReader* r, const ExpressionContext& context, Stack* stack) {
  uint8_t opcode;
  if (!r->ReadU8(&opcode)) return false;
  uint64_t value, a, b, c;
  int64_t offset;
  if (opcode >= 0x30 && opcode <= 0x4f) return stack->Push(opcode - 0x30);  // DW_OP_lit<n>
  if (opcode >= 0x70 && opcode <= 0x8f) {                                   // DW_OP_breg<n>
    return r->ReadSleb(&offset) && context.ReadRegister(opcode - 0x70, &value) &&
           stack->Push(value + static_cast<uint64_t>(offset));
  }
  switch (opcode) {
    case 0x03:  // DW_OP_addr
      return r->ReadUnsigned(context.AddressSize(), &value) && stack->Push(value);
    case 0x06:  // DW_OP_deref
      return stack->Pop(&a) && context.ReadMemory(a, &value) && stack->Push(value);
    case 0x08: case 0x0a: case 0x0c: case 0x0e:  // DW_OP_const<1,2,4,8>u
      return r->ReadUnsigned(size_t{1} << ((opcode - 0x08) / 2), &value) && stack->Push(value);
    case 0x09: case 0x0b: case 0x0d: case 0x0f: {  // DW_OP_const<1,2,4,8>s
      unsigned bits = 8u << ((opcode - 0x09) / 2);
      if (!r->ReadUnsigned(bits / 8, &value)) return false;
      if (bits < 64) {
        uint64_t sign = uint64_t{1} << (bits - 1);
        value = (value ^ sign) - sign;
      }
      return stack->Push(value);
    }
    case 0x10:  // DW_OP_constu
      return r->ReadUleb(&value) && stack->Push(value);
    case 0x11:  // DW_OP_consts
      return r->ReadSleb(&offset) && stack->Push(static_cast<uint64_t>(offset));
    case 0x12:  // DW_OP_dup
      return stack->Peek(0, &a) && stack->Push(a);
    case 0x13:  // DW_OP_drop
      return stack->Pop(&a);
    case 0x14:  // DW_OP_over
      return stack->Peek(1, &a) && stack->Push(a);
    case 0x15: {  // DW_OP_pick
      uint8_t index;
      return r->ReadU8(&index) && stack->Peek(index, &a) && stack->Push(a);
    }
    case 0x16:  // DW_OP_swap
      return stack->Pop(&a) && stack->Pop(&b) && stack->Push(a) && stack->Push(b);
    case 0x17:  // DW_OP_rot: the top three rotate, the top becoming the third
      return stack->Pop(&a) && stack->Pop(&b) && stack->Pop(&c) && stack->Push(a) &&
             stack->Push(c) && stack->Push(b);
    case 0x19:  // DW_OP_abs
      if (stack->size() == 0) return false;
      if (stack->type().Signed(stack->top()) < 0) stack->ReplaceTop(0 - stack->top());
      return true;
    case 0x1f:  // DW_OP_neg
      if (stack->size() == 0) return false;
      stack->ReplaceTop(0 - stack->top());
      return true;
    case 0x20:  // DW_OP_not
      if (stack->size() == 0) return false;
      stack->ReplaceTop(~stack->top());
      return true;
    case 0x23:  // DW_OP_plus_uconst
      if (!r->ReadUleb(&value) || stack->size() == 0) return false;
      stack->ReplaceTop(stack->top() + value);
      return true;
    case 0x1a: case 0x1b: case 0x1c: case 0x1d: case 0x1e: case 0x21: case 0x22: case 0x24:
    case 0x25: case 0x26: case 0x27: case 0x29: case 0x2a: case 0x2b: case 0x2c: case 0x2d:
    case 0x2e:
      return Binary(opcode, stack);
    case 0x28:  // DW_OP_bra
      if (!stack->Pop(&a)) return false;
      if (a != 0) return Jump(r);
      return r->Skip(2);
    case 0x2f:  // DW_OP_skip
      return Jump(r);
    case 0x92: {  // DW_OP_bregx
      uint64_t reg;
      return r->ReadUleb(&reg) && r->ReadSleb(&offset) && reg <= UINT32_MAX &&
             context.ReadRegister(static_cast<uint32_t>(reg), &value) &&
             stack->Push(value + static_cast<uint64_t>(offset));
    }
    case 0x94: {  // DW_OP_deref_size: the context reads whole words; keep the low bytes
      uint8_t size;
      if (!r->ReadU8(&size) || size == 0 || size > context.AddressSize() || !stack->Pop(&a) ||
          !context.ReadMemory(a, &value)) {
        return false;
      }
      if (size < 8) value &= (uint64_t{1} << (8 * size)) - 1;
      return stack->Push(value);
    }
    case 0x96:  // DW_OP_nop
      return true;
    // DW_OP_reg<n> and DW_OP_regx name a location, not a value: not valid in CFI expressions.
    default:
      return false;
  }
}

}  // namespace

bool EvaluateExpression(const uint8_t* expression, size_t size, const ExpressionContext& context,
                        bool push_initial, uint64_t initial, uint64_t* result) {
  if (!expression && size > 0) return false;
  const uint32_t address_size = context.AddressSize();
  if (address_size != 4 && address_size != 8) return false;
  Stack stack(Generic{8 * address_size});
  if (push_initial) stack.Push(initial);
  cfi::ByteReader reader(expression, size, 0);
  for (int steps = 0; !reader.at_end(); ++steps) {
    if (steps == kMaxSteps || !Step(&reader, context, &stack)) return false;
  }
  return stack.Pop(result);
}

}  // namespace droidheap

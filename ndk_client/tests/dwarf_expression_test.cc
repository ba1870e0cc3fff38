// EvaluateExpression: arithmetic and stack operations, branches and loops, register and memory
// reads through the context, the x86_64 and x86 PLTs' CFA expressions, a 32-bit target's generic
// type, and the failures that must come back as false (underflow, overflow, unknown or location
// operations, runaway loops).
#include <stdio.h>
#include <string.h>

#include <initializer_list>
#include <map>
#include <vector>

#include "tests/dwarf_test_util.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_cfi.h"

using droidheap::EvaluateExpression;

namespace {

struct FakeContext : droidheap::ExpressionContext {
  uint32_t address_size = 8;
  uint64_t regs[droidheap::kMaxRegisters] = {};
  uint32_t AddressSize() const override { return address_size; }
  std::map<uint64_t, uint64_t> memory;
  bool ReadRegister(uint32_t reg, uint64_t* value) const override {
    if (reg >= droidheap::kMaxRegisters) return false;
    *value = regs[reg];
    return true;
  }
  bool ReadMemory(uint64_t address, uint64_t* value) const override {
    auto it = memory.find(address);
    if (it == memory.end()) return false;
    *value = it->second;
    return true;
  }
};

using Expr = Bytes;  // an expression assembled from bytes

const FakeContext kNoContext;

bool Eval(const Expr& e, uint64_t* out, const FakeContext& context = kNoContext,
          bool push_initial = false, uint64_t initial = 0) {
  return EvaluateExpression(e.v.data(), e.v.size(), context, push_initial, initial, out);
}

uint64_t Value(const Expr& e, const FakeContext& context = kNoContext) {
  uint64_t out = 0;
  CHECK(Eval(e, &out, context));
  return out;
}

int64_t Signed(const Expr& e) { return static_cast<int64_t>(Value(e)); }

bool Fails(const Expr& e, const FakeContext& context = kNoContext) {
  uint64_t out;
  return !Eval(e, &out, context);
}

constexpr uint8_t kLit0 = 0x30, kBreg0 = 0x70;

void TestConstants() {
  CHECK(Value({kLit0 + 31}) == 31);
  CHECK(Value(Expr({0x03}).le(0x123456789abcdef0, 8)) == 0x123456789abcdef0);  // addr
  CHECK(Value({0x08, 0xff}) == 0xff && Signed({0x09, 0xff}) == -1);
  CHECK(Value({0x0a, 0xff, 0xff}) == 0xffff && Signed({0x0b, 0xfe, 0xff}) == -2);
  CHECK(Value(Expr({0x0c}).le(0x80000000, 4)) == 0x80000000);
  CHECK(Signed(Expr({0x0d}).le(0xfffffffd, 4)) == -3);
  CHECK(Value(Expr({0x0e}).le(~uint64_t{0} - 1, 8)) == ~uint64_t{0} - 1);
  CHECK(Signed(Expr({0x0f}).le(static_cast<uint64_t>(-4), 8)) == -4);
  CHECK(Value({0x10, 0xe5, 0x8e, 0x26}) == 624485);  // constu, the DWARF spec's example
  CHECK(Signed(Expr({0x11}).sleb(-123456)) == -123456);
}

void TestArithmetic() {
  CHECK(Value({kLit0 + 5, kLit0 + 3, 0x1c}) == 2);                  // minus
  CHECK(Value({kLit0 + 5, kLit0 + 3, 0x22}) == 8);                  // plus
  CHECK(Value({kLit0 + 5, 0x23, 0x80, 0x01}) == 133);               // plus_uconst
  CHECK(Value({kLit0 + 6, kLit0 + 7, 0x1e}) == 42);                 // mul
  CHECK(Signed(Expr({0x11}).sleb(-9).op({kLit0 + 2, 0x1b})) == -4);  // div is signed
  CHECK(Signed(Expr({0x11}).sleb(INT64_MIN).op({0x11, 0x7f, 0x1b})) == INT64_MIN);
  CHECK(Value({kLit0 + 7, kLit0 + 3, 0x1d}) == 1);                  // mod
  CHECK(Fails({kLit0 + 1, kLit0, 0x1b}) && Fails({kLit0 + 1, kLit0, 0x1d}));
  CHECK(Signed({kLit0 + 5, 0x1f}) == -5 && Value({kLit0 + 5, 0x1f, 0x19}) == 5);  // neg, abs
  CHECK(Value({kLit0, 0x20}) == ~uint64_t{0});                      // not
  CHECK(Value({kLit0 + 12, kLit0 + 10, 0x1a}) == 8);                // and
  CHECK(Value({kLit0 + 12, kLit0 + 10, 0x21}) == 14);               // or
  CHECK(Value({kLit0 + 12, kLit0 + 10, 0x27}) == 6);                // xor
  CHECK(Value({kLit0 + 3, kLit0 + 4, 0x24}) == 48);                 // shl
  CHECK(Signed(Expr({0x11}).sleb(-16).op({kLit0 + 2, 0x26})) == -4);  // shra
  CHECK(Value(Expr({0x11}).sleb(-16).op({kLit0 + 2, 0x25})) == (~uint64_t{0} - 15) >> 2);
  CHECK(Value(Expr({kLit0 + 1, 0x08, 64, 0x24})) == 0);             // over-wide shifts
  CHECK(Signed(Expr({0x11}).sleb(-1).op({0x08, 200, 0x26})) == -1);
}

void TestStackOperations() {
  CHECK(Value({kLit0 + 4, 0x12, 0x22}) == 8);                       // dup
  CHECK(Value({kLit0 + 4, kLit0 + 9, 0x13}) == 4);                  // drop
  CHECK(Value({kLit0 + 4, kLit0 + 9, 0x14}) == 4);                  // over
  CHECK(Value({kLit0 + 1, kLit0 + 2, kLit0 + 3, 0x15, 2}) == 1);    // pick
  CHECK(Value({kLit0 + 1, kLit0 + 2, 0x16, 0x1c}) == 1);            // swap
  // rot: (1 2 3, top 3) becomes (3 1 2, top 2).
  CHECK(Value({kLit0 + 1, kLit0 + 2, kLit0 + 3, 0x17}) == 2);
  CHECK(Value({kLit0 + 1, kLit0 + 2, kLit0 + 3, 0x17, 0x13}) == 1);
  CHECK(Value({kLit0 + 1, kLit0 + 2, kLit0 + 3, 0x17, 0x13, 0x13}) == 3);
  CHECK(Value({kLit0 + 1, 0x96}) == 1);                             // nop
}

void TestComparisonsAndBranches() {
  CHECK(Value({kLit0 + 3, kLit0 + 5, 0x2d}) == 1 && Value({kLit0 + 3, kLit0 + 5, 0x2b}) == 0);
  CHECK(Value(Expr({0x11}).sleb(-1).op({kLit0 + 1, 0x2b})) == 0);  // signed: -1 > 1 is false
  CHECK(Value({kLit0 + 5, kLit0 + 5, 0x29}) == 1 && Value({kLit0 + 5, kLit0 + 5, 0x2e}) == 0);
  CHECK(Value({kLit0 + 5, kLit0 + 5, 0x2a}) == 1 && Value({kLit0 + 6, kLit0 + 5, 0x2c}) == 0);
  // bra taken skips lit9; not taken it pushes it.
  CHECK(Value({kLit0 + 2, kLit0 + 1, 0x28, 1, 0, kLit0 + 9, kLit0 + 7, 0x22}) == 9);
  CHECK(Value({kLit0 + 2, kLit0 + 0, 0x28, 1, 0, kLit0 + 9, kLit0 + 7, 0x22}) == 16);
  CHECK(Value({kLit0 + 1, 0x2f, 1, 0, kLit0 + 9, kLit0 + 3, 0x22}) == 4);  // skip
  // A counted loop: n = 5; do n -= 1 while n.
  Expr loop = {kLit0 + 5, kLit0 + 1, 0x1c, 0x12, 0x28};
  CHECK(Value(loop.le(static_cast<uint16_t>(-6), 2)) == 0);
  CHECK(Value({kLit0 + 1, 0x2f, 0, 0}) == 1);                       // a jump to the end
  CHECK(Fails({kLit0 + 1, 0x2f, 10, 0}) && Fails({kLit0 + 1, 0x2f, 0xf0, 0xff}));  // outside
  CHECK(Fails({0x2f, 0xfd, 0xff}));                                 // forever: the step bound
  CHECK(Fails({0x28, 0, 0}));                                       // bra on an empty stack
}

void TestRegistersAndMemory() {
  FakeContext context;
  context.regs[7] = 0x1000;
  context.regs[31] = 0x2000;
  context.memory[0x1008] = 0x1122334455667788;
  CHECK(Value(Expr({kBreg0 + 7}).sleb(8), context) == 0x1008);
  CHECK(Value(Expr({kBreg0 + 31}).sleb(-16), context) == 0x1ff0);
  CHECK(Value(Expr({0x92, 7}).sleb(-8), context) == 0xff8);  // bregx
  CHECK(Value(Expr({kBreg0 + 7}).sleb(8).op({0x06}), context) == 0x1122334455667788);
  const std::pair<uint8_t, uint64_t> sizes[] = {
      {1, 0x88}, {2, 0x7788}, {4, 0x55667788}, {8, 0x1122334455667788}};
  for (auto [size, expected] : sizes) {
    CHECK(Value(Expr({kBreg0 + 7}).sleb(8).op({0x94, size}), context) == expected);
  }
  CHECK(Fails(Expr({kBreg0 + 7}).sleb(8).op({0x94, 0}), context));
  CHECK(Fails(Expr({kBreg0 + 7}).sleb(8).op({0x94, 9}), context));
  CHECK(Fails(Expr({kBreg0 + 7}).sleb(0).op({0x06}), context));  // unreadable memory
  CHECK(Fails(Expr({0x92, 0x80, 0x01}).sleb(0), context));        // register 128: unreadable
  uint64_t out;
  CHECK(Eval({0x23, 16}, &out, context, true, 0x100) && out == 0x110);  // CFA pushed first
  CHECK(Eval({0x06}, &out, context, true, 0x1008) && out == 0x1122334455667788);
}

// ld's CFI for x86_64 lazy PLT entries: CFA = rsp + 8, + 8 more from offset 11 (after the
// entry's push). Register numbers 7 and 16 are only slots here, so this runs on aarch64 too.
void TestPltExpression() {
  const Expr plt = {kBreg0 + 7, 8, kBreg0 + 16, 0, kLit0 + 15, 0x1a, kLit0 + 11, 0x2a,
                    kLit0 + 3, 0x24, 0x22};
  FakeContext context;
  context.regs[7] = 0x7ffc0000;
  for (uint64_t offset = 0; offset < 16; ++offset) {
    context.regs[16] = 0x401020 + offset;
    CHECK(Value(plt, context) == (offset >= 11 ? 0x7ffc0010u : 0x7ffc0008u));
  }
}

// A 32-bit target (x86, armeabi-v7a, read by a 64-bit daemon): the generic type is 32 bits wide,
// values wrap and compare as 32-bit numbers, DW_OP_addr has 4 bytes.
void TestAddressSize4() {
  FakeContext context;
  context.address_size = 4;
  CHECK(Value({0x03, 0x78, 0x56, 0x34, 0x12}, context) == 0x12345678);   // DW_OP_addr
  CHECK(Value({kLit0, kLit0 + 1, 0x1c}, context) == 0xffffffffu);        // 0 - 1 wraps
  CHECK(Value(Expr({0x11}).sleb(-1), context) == 0xffffffffu);          // consts -1
  CHECK(Value(Expr({0x11}).sleb(-1).op({kLit0 + 1, 0x2d}), context) == 1);  // -1 < 1
  CHECK(Value(Expr({0x10}).uleb(0xffffffff).op({kLit0 + 1, 0x2b}), context) == 0);  // -1 > 1
  CHECK(Value(Expr({0x10}).uleb(0x80000000).op({kLit0 + 4, 0x26}), context) == 0xf8000000u);
  CHECK(Value(Expr({0x10}).uleb(0x80000000).op({kLit0 + 1, 0x24}), context) == 0);  // shl out
  CHECK(Value(Expr({0x10}).uleb(0xfffffff0).op({0x23, 0x20}), context) == 0x10);  // plus_uconst
  CHECK(Value(Expr({0x11}).sleb(-5).op({0x19}), context) == 5);                // abs
  context.memory[0x1000] = 0x11223344;
  context.regs[4] = 0x1000;
  CHECK(Value(Expr({kBreg0 + 4}).sleb(0).op({0x94, 4}), context) == 0x11223344);
  CHECK(Fails(Expr({kBreg0 + 4}).sleb(0).op({0x94, 8}), context));  // wider than a word
  // ld's CFI for x86 lazy PLT entries: CFA = esp + 4, + 4 more from offset 11, here with esp in
  // the upper half of the address space.
  const Expr plt = {kBreg0 + 4, 4, kBreg0 + 8, 0, kLit0 + 15, 0x1a, kLit0 + 11, 0x2a,
                    kLit0 + 2, 0x24, 0x22};
  context.regs[4] = 0xfffc0000u;
  for (uint64_t offset = 0; offset < 16; ++offset) {
    context.regs[8] = 0x8049020 + offset;
    CHECK(Value(plt, context) == (offset >= 11 ? 0xfffc0008u : 0xfffc0004u));
  }
  context.address_size = 2;  // no such target
  CHECK(Fails({kLit0}, context));
}

void TestFailures() {
  uint64_t out;
  CHECK(!EvaluateExpression(nullptr, 0, kNoContext, false, 0, &out));  // empty: nothing on top
  CHECK(Fails({0x22}) && Fails({kLit0, 0x22}) && Fails({0x13}) && Fails({0x12}));  // underflow
  CHECK(Fails({kLit0, 0x14}) && Fails({kLit0, kLit0, 0x17}) && Fails({kLit0, 0x15, 1}));
  CHECK(Fails({0x19}) && Fails({0x1f}) && Fails({0x20}) && Fails({0x23, 1}));
  CHECK(Fails({0x50 + 5}) && Fails({0x90, 5}));         // reg5, regx: locations, not values
  CHECK(Fails({0xe0}) && Fails({0x02}) && Fails({0x9f}));  // unknown / unsupported
  CHECK(Fails({0x0c, 1, 2}) && Fails({0x03, 1}) && Fails({0x10, 0x80}));  // truncated operands
  Expr overflow = {};
  for (int i = 0; i < 65; ++i) overflow.op({kLit0});
  CHECK(Fails(overflow));
  overflow.v.pop_back();
  CHECK(Value(overflow) == 0);  // 64 entries fit
  Expr long_expression = {};
  for (int i = 0; i < 1001; ++i) long_expression.op({0x96});
  long_expression.op({kLit0});
  CHECK(Fails(long_expression));  // more steps than the bound, even without a loop
}

}  // namespace

int main() {
  TestConstants();
  TestArithmetic();
  TestStackOperations();
  TestComparisonsAndBranches();
  TestRegistersAndMemory();
  TestPltExpression();
  TestAddressSize4();
  TestFailures();
  printf("dwarf_expression_test: ok\n");
  return 0;
}

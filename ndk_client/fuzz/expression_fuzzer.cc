// DWARF expressions (unwinder/dwarf_cfi.h: EvaluateExpression) as a hostile ELF file or process
// could hand them to the unwinder: any bytes, any address size, memory and registers that answer
// or fail. Evaluation must end, in bounded steps, without reading outside the expression.
#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "fuzz/fuzz_input.h"
#include "unwinder/dwarf_cfi.h"

namespace {

class FuzzContext : public droidheap::ExpressionContext {
 public:
  FuzzContext(uint32_t address_size, uint64_t seed) : address_size_(address_size), seed_(seed) {}
  uint32_t AddressSize() const override { return address_size_; }
  bool ReadRegister(uint32_t reg, uint64_t* value) const override {
    if (reg >= droidheap::kMaxRegisters || (seed_ >> (reg % 64)) & 1) return false;
    *value = seed_ * (reg + 1);
    return true;
  }
  bool ReadMemory(uint64_t address, uint64_t* value) const override {
    if ((address ^ seed_) & 1) return false;
    *value = address * 0x9e3779b97f4a7c15ull;
    if (address_size_ == 4) *value &= 0xffffffffu;
    return true;
  }

 private:
  uint32_t address_size_;
  uint64_t seed_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  droidheap::FuzzInput input(data, size);
  const uint8_t flags = input.Take<uint8_t>();
  const uint64_t seed = input.Take<uint64_t>();
  const uint64_t initial = input.Take<uint64_t>();
  size_t length;
  const uint8_t* bytes = input.TakeBytes(input.remaining(), &length);
  // A copy of exactly the expression's length: ASan then sees any read past its end.
  std::vector<uint8_t> expression(bytes, bytes + length);
  FuzzContext context(flags & 1 ? 4 : 8, seed);
  uint64_t result;
  droidheap::EvaluateExpression(expression.data(), expression.size(), context, flags & 2, initial,
                                &result);
  return 0;
}

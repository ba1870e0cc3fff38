// Call-frame information (unwinder/dwarf_cfi.h: CfiTable) from a hostile ELF file: .eh_frame,
// .eh_frame_hdr and .debug_frame of any content and address, looked up at pcs the input picks,
// and the expressions of the rows found evaluated. Nothing may read outside the sections, loop
// without bound or trust a length.
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "unwinder/dwarf_cfi.h"

namespace {

class NoMemory : public droidheap::ExpressionContext {
 public:
  explicit NoMemory(uint32_t address_size) : address_size_(address_size) {}
  uint32_t AddressSize() const override { return address_size_; }
  bool ReadRegister(uint32_t reg, uint64_t* value) const override {
    *value = 0x1000 + reg * 8;
    return reg < droidheap::kMaxRegisters;
  }
  bool ReadMemory(uint64_t address, uint64_t* value) const override {
    *value = address + 8;
    return true;
  }

 private:
  uint32_t address_size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  droidheap::FuzzInput input(data, size);
  const uint8_t address_size = input.Take<uint8_t>() & 1 ? 4 : 8;
  // Each section: its length (bounded by what is left) and address, then its bytes, copied to a
  // buffer of exactly that length so that ASan sees a read past it.
  std::vector<uint8_t> sections[3];
  droidheap::CfiSectionView views[3];
  for (int i = 0; i < 3; ++i) {
    const uint16_t want = input.Take<uint16_t>();
    const uint64_t vaddr = input.Take<uint32_t>();
    size_t got;
    const uint8_t* bytes = input.TakeBytes(want, &got);
    sections[i].assign(bytes, bytes + got);
    views[i].data = sections[i].empty() ? nullptr : sections[i].data();
    views[i].size = sections[i].size();
    views[i].vaddr = vaddr;
    views[i].address_size = address_size;
  }
  droidheap::CfiTable table(views[0], views[1], views[2]);
  NoMemory context(address_size);
  for (int lookups = 0; lookups < 8; ++lookups) {
    const uint64_t pc = input.Take<uint32_t>();
    droidheap::CfiRow row;
    if (!table.FindRow(pc, &row)) continue;
    uint64_t value;
    if (row.cfa.is_expression) {
      droidheap::EvaluateExpression(row.cfa.expression, row.cfa.expression_size, context, false,
                                    0, &value);
    }
    for (const droidheap::RegisterRule& rule : row.regs) {
      if (rule.kind == droidheap::RuleKind::kExpression ||
          rule.kind == droidheap::RuleKind::kValExpression) {
        droidheap::EvaluateExpression(rule.expression, rule.expression_size, context, true,
                                      0x2000, &value);
      }
    }
  }
  return 0;
}

// ARM EHABI tables (unwinder/arm_exidx.h) from a hostile ELF file: .ARM.exidx and .ARM.extab of any
// content, any PT_ARM_EXIDX and PT_LOAD placement, looked up at pcs the input picks, and the unwind
// instructions of the entries found executed (unwinder/arm_unwind_program.h) on a stack of the
// input's words. Nothing may read outside the file or the stack, or loop without bound.
#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "fuzz/fuzz_input.h"
#include "unwinder/arm_exidx.h"
#include "unwinder/arm_unwind_program.h"
#include "unwinder/registers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  droidheap::FuzzInput input(data, size);
  const uint64_t exidx_offset = input.Take<uint16_t>();
  const uint64_t exidx_size = input.Take<uint16_t>();
  const uint64_t exidx_vaddr = input.Take<uint32_t>();
  std::vector<droidheap::ArmExidxTable::Segment> loads;
  for (int i = 0; i < 2; ++i) {
    const uint64_t offset = input.Take<uint16_t>();
    const uint64_t vaddr = input.Take<uint32_t>();
    const uint64_t file_size = input.Take<uint16_t>();
    loads.push_back({offset, vaddr, file_size, (input.Take<uint8_t>() & 1) != 0});
  }
  uint32_t pcs[4];
  for (uint32_t& pc : pcs) pc = input.Take<uint32_t>();
  // The stack: up to 64 words, then the file; each copied to a buffer of exactly its length so
  // that ASan sees a read past it.
  size_t got;
  const uint8_t* stack_bytes = input.TakeBytes(input.Take<uint8_t>() % 65 * 4, &got);
  const std::vector<uint8_t> stack(stack_bytes, stack_bytes + got);
  const uint8_t* file_bytes = input.TakeBytes(input.remaining(), &got);
  const std::vector<uint8_t> file(file_bytes, file_bytes + got);

  droidheap::ArmExidxTable table(file.data(), file.size(), exidx_offset, exidx_size, exidx_vaddr,
                                 loads);
  const uint64_t stack_start = 0x10000;
  droidheap::StackMemory memory(stack_start, stack.data(), stack.size(), -1);
  for (uint32_t pc : pcs) {
    droidheap::ArmExidxEntry entry = table.Find(pc);
    if (entry.status != droidheap::ArmExidxStatus::kFound) continue;
    uint64_t regs[droidheap::kMaxRegisters] = {};
    for (int r = 0; r < 16; ++r) regs[r] = stack_start + static_cast<uint64_t>(r) * 8;
    droidheap::ExecuteArmUnwind(entry.bytes, memory, regs);
  }
  return 0;
}

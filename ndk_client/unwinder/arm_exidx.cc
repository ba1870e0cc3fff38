#include "unwinder/arm_exidx.h"

#include <string.h>

#include <utility>

namespace droidheap {
namespace {

constexpr uint32_t kExidxCantUnwind = 1;
constexpr uint32_t kCompactBit = 0x80000000u;

}  // namespace

ArmExidxTable::ArmExidxTable(const uint8_t* data, size_t size, uint64_t exidx_offset,
                             uint64_t exidx_size, uint64_t exidx_vaddr,
                             std::vector<Segment> loads, uint64_t data_offset)
    : data_(data), size_(size), data_offset_(data_offset), loads_(std::move(loads)) {
  // EHABI exists for 32-bit files only: a table beyond 4 GiB of address space is not one.
  if (exidx_offset < data_offset || exidx_offset - data_offset > size ||
      exidx_size > size - (exidx_offset - data_offset) || exidx_vaddr > 0xffffffffu ||
      exidx_vaddr + exidx_size > 0x100000000ull) {
    return;
  }
  exidx_offset_ = exidx_offset - data_offset;
  exidx_vaddr_ = static_cast<uint32_t>(exidx_vaddr);
  count_ = static_cast<size_t>(exidx_size / 8);
}

uint32_t ArmExidxTable::Word(uint64_t offset) const {
  uint32_t word;
  memcpy(&word, data_ + offset, sizeof(word));  // ELF files of the ABIs here are little-endian
  return word;
}

uint32_t ArmExidxTable::FunctionStart(size_t i) const {
  const uint64_t offset = exidx_offset_ + uint64_t{i} * 8;
  // prel31 values are computed as (S + A) | T - P: a Thumb function's carries its Thumb bit.
  return Prel31(Word(offset), exidx_vaddr_ + static_cast<uint32_t>(i) * 8) & ~1u;
}

bool ArmExidxTable::OffsetOf(uint64_t vaddr, uint64_t length, uint64_t* offset) const {
  for (const Segment& s : loads_) {
    if (vaddr >= s.vaddr && vaddr - s.vaddr <= s.file_size &&
        length <= s.file_size - (vaddr - s.vaddr)) {
      const uint64_t file_offset = s.offset + (vaddr - s.vaddr);
      if (file_offset < data_offset_) return false;
      *offset = file_offset - data_offset_;
      return *offset <= size_ && length <= size_ - *offset;
    }
  }
  return false;
}

bool ArmExidxTable::IsCode(uint32_t vaddr) const {
  for (const Segment& s : loads_) {
    if (s.executable && vaddr >= s.vaddr && vaddr - s.vaddr < s.file_size) return true;
  }
  return false;
}

ArmExidxEntry ArmExidxTable::Find(uint64_t elf_pc) const {
  ArmExidxEntry entry;
  if (count_ == 0 || elf_pc > 0xffffffffu) return entry;
  const uint32_t pc = static_cast<uint32_t>(elf_pc);
  // The last entry whose function starts at or before pc: a function's entry covers it up to the
  // next entry's start (linkers end the table with a CANTUNWIND entry after the last function).
  // At most log2(count) steps, whatever order a hostile table's entries are in.
  size_t low = 0;
  size_t high = count_;
  while (low < high) {
    const size_t middle = low + (high - low) / 2;
    if (FunctionStart(middle) <= pc) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  if (low == 0) return entry;
  const size_t index = low - 1;
  entry.index = static_cast<uint32_t>(index);
  const uint64_t word_offset = exidx_offset_ + uint64_t{index} * 8 + 4;
  const uint32_t word_vaddr = exidx_vaddr_ + static_cast<uint32_t>(index) * 8 + 4;
  const uint32_t word = Word(word_offset);
  if (word == kExidxCantUnwind) {
    entry.status = ArmExidxStatus::kCantUnwind;
    return entry;
  }
  if (word & kCompactBit) {
    // Inline: only personality routine 0 fits, its three instruction bytes in the word itself.
    entry.status = (word & 0x7f000000u) == 0 ? ArmExidxStatus::kFound : ArmExidxStatus::kMalformed;
    entry.bytes = {data_ + word_offset, 1, 3};
    return entry;
  }
  entry = ReadExtab(Prel31(word, word_vaddr));
  entry.index = static_cast<uint32_t>(index);
  return entry;
}

ArmExidxEntry ArmExidxTable::ReadExtab(uint32_t extab_vaddr) const {
  ArmExidxEntry entry;
  entry.status = ArmExidxStatus::kMalformed;
  uint64_t offset = 0;
  if (!OffsetOf(extab_vaddr, 4, &offset)) return entry;
  const uint32_t first = Word(offset);
  if (first & kCompactBit) {
    // The compact model (EHABI 6.3): bits 27-24 the personality routine's index, 30-28 zero.
    if ((first & 0x70000000u) != 0) return entry;
    const uint32_t index = (first >> 24) & 0xf;
    if (index == 0) {
      entry.bytes = {data_ + offset, 1, 3};
    } else if (index == 1 || index == 2) {
      // Bits 23-16 count the words of instructions after this one, which holds two bytes.
      const uint32_t more = (first >> 16) & 0xff;
      if (!OffsetOf(extab_vaddr, 4 + uint64_t{more} * 4, &offset)) return entry;
      entry.bytes = {data_ + offset, 2, 2 + more * 4};
    } else {
      return entry;  // indices 3-15 are reserved
    }
    entry.status = ArmExidxStatus::kFound;
    return entry;
  }
  // The generic model: a prel31 reference to a personality routine, then that routine's data. The
  // routines of GCC and LLVM (__gxx_personality_v0, __gcc_personality_v0 ...) begin it with the
  // unwind instructions in the layout of models 1 and 2, the count of further words in bits 31-24,
  // and the compilers emit nothing else for ARM. Another routine's data would be indistinguishable
  // from it, so the reference must at least name code of this file (a function or its PLT entry),
  // and the instructions must lie inside the segment; the program executing them checks the rest.
  if (!IsCode(Prel31(first, extab_vaddr))) return entry;
  const uint32_t data_vaddr = extab_vaddr + 4;
  if (data_vaddr < extab_vaddr || !OffsetOf(data_vaddr, 4, &offset)) return entry;
  const uint32_t more = Word(offset) >> 24;
  if (!OffsetOf(data_vaddr, 4 + uint64_t{more} * 4, &offset)) return entry;
  entry.bytes = {data_ + offset, 1, 3 + more * 4};
  entry.status = ArmExidxStatus::kFound;
  return entry;
}

}  // namespace droidheap

// The ARM EHABI unwind table of one 32-bit ARM ELF file (ARM IHI 0038, "Exception Handling ABI for
// the Arm Architecture", sections 5-7 and 10): .ARM.exidx, found through PT_ARM_EXIDX, a sorted
// table of 8-byte entries {prel31 function start, word}; the word is EXIDX_CANTUNWIND, an inline
// compact entry (personality 0) or a prel31 reference to an .ARM.extab entry. Finding a pc's entry
// yields the unwind instruction bytes that arm_unwind_program.h executes.
//
// A read-only view over bytes of a file that its CfiFile read (and owns with it); built once per
// file and used by the unwinding worker that owns that file's ElfCache (not thread-safe, no state
// changes after construction). The file belongs to the profiled app: every offset is checked to lie
// in the file and in a loadable segment, and a malformed entry yields kMalformed, never a read out
// of bounds.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace droidheap {

// The unwind instruction bytes of one entry, where they lie in the file: instructions are packed
// into 32-bit words most significant byte first, so byte k is byte 3 - (first + k) % 4 of the
// little-endian word (first + k) / 4 counted from `words`. A view into the mapped file.
struct ArmUnwindBytes {
  const uint8_t* words = nullptr;
  uint32_t first = 0;  // the first instruction byte's position in MSB-first order
  uint32_t count = 0;  // instruction bytes in all

  uint8_t At(uint32_t k) const {
    const uint32_t position = first + k;
    return words[(position / 4) * 4 + 3 - position % 4];
  }
};

enum class ArmExidxStatus : uint8_t {
  kFound,        // `bytes` describes how to unwind the function
  kNotCovered,   // no entry covers the pc (before the first function; no table)
  kCantUnwind,   // EXIDX_CANTUNWIND: the function says it cannot be unwound
  kMalformed,    // an entry the table gives cannot be read or is not a model we can execute
};

struct ArmExidxEntry {
  ArmExidxStatus status = ArmExidxStatus::kNotCovered;
  uint32_t index = 0;  // in the table, unless kNotCovered
  ArmUnwindBytes bytes;
};

class ArmExidxTable {
 public:
  // A PT_LOAD segment: ELF virtual addresses [vaddr, vaddr + file_size) are the file's bytes from
  // `offset`.
  struct Segment {
    uint64_t offset;
    uint64_t vaddr;
    uint64_t file_size;
    bool executable;
  };

  // `data`/`size`: the file's bytes from its offset `data_offset` (the table and the .ARM.extab
  // entries it names; an entry outside them is kMalformed). `exidx_offset`/`exidx_size`/
  // `exidx_vaddr`: PT_ARM_EXIDX's. An empty table when the segment does not lie inside `data`.
  ArmExidxTable(const uint8_t* data, size_t size, uint64_t exidx_offset, uint64_t exidx_size,
                uint64_t exidx_vaddr, std::vector<Segment> loads, uint64_t data_offset = 0);

  // The entry covering `elf_pc`, an address in the ELF's address space (Thumb bit clear; for a
  // return address the caller passes return address - 1).
  ArmExidxEntry Find(uint64_t elf_pc) const;

  size_t entry_count() const { return count_; }
  size_t memory_bytes() const { return loads_.capacity() * sizeof(Segment); }
  // The function start of entry `i` (< entry_count()), Thumb bit clear.
  uint32_t FunctionStart(size_t i) const;

 private:
  // Where `length` bytes at ELF address `vaddr` lie in data_, inside one loadable segment; false
  // when no segment holds them all, or data_ does not.
  bool OffsetOf(uint64_t vaddr, uint64_t length, uint64_t* offset) const;
  uint32_t Word(uint64_t offset) const;  // a checked offset's little-endian word
  ArmExidxEntry ReadExtab(uint32_t extab_vaddr) const;
  // A personality routine's address is plausibly one: inside an executable segment.
  bool IsCode(uint32_t vaddr) const;

  const uint8_t* data_;
  size_t size_;
  uint64_t data_offset_;   // the file offset of data_[0]
  uint64_t exidx_offset_ = 0;  // in data_
  uint32_t exidx_vaddr_ = 0;
  size_t count_ = 0;
  std::vector<Segment> loads_;
};

// A prel31 field (bits 0-30 of `word`, a signed offset) applied to the address it was read at.
inline uint32_t Prel31(uint32_t word, uint32_t address) {
  uint32_t offset = word & 0x7fffffffu;
  if (offset & 0x40000000u) offset |= 0x80000000u;  // sign-extend bit 30
  return address + offset;
}

}  // namespace droidheap

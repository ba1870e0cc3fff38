// The pieces of call-frame information below the table: a bounded byte cursor, GCC's DW_EH_PE_*
// pointer encodings (LSB, "DWARF Extensions"), and the CIE and FDE headers of .eh_frame and
// .debug_frame (DWARF 5 section 6.4.1). Internal to the unwinder: CfiTable and the CFA program
// interpreter use it. Stateless and allocation-free; every read is checked against the entry it
// belongs to, since the bytes come from files we do not trust.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "unwinder/dwarf_cfi.h"

namespace droidheap {
namespace cfi {

// A cursor over [0, end) of a section. Positions are section offsets so that pc-relative pointers
// can be resolved against the section's address. A failed read leaves the position unspecified;
// callers give up on the entry.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t end, size_t pos) : data_(data), end_(end), pos_(pos) {}

  size_t pos() const { return pos_; }
  size_t end() const { return end_; }
  bool at_end() const { return pos_ >= end_; }
  size_t remaining() const { return pos_ < end_ ? end_ - pos_ : 0; }
  const uint8_t* current() const { return data_ + pos_; }

  bool Skip(uint64_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }
  bool SeekTo(size_t pos) {
    if (pos > end_) return false;
    pos_ = pos;
    return true;
  }
  bool ReadU8(uint8_t* v) { return ReadFixed(v, 1); }
  bool ReadU16(uint16_t* v) { return ReadFixed(v, 2); }
  bool ReadU32(uint32_t* v) { return ReadFixed(v, 4); }
  bool ReadU64(uint64_t* v) { return ReadFixed(v, 8); }
  // Little-endian unsigned value of `size` (1..8) bytes.
  bool ReadUnsigned(size_t size, uint64_t* v);
  bool ReadUleb(uint64_t* v);
  bool ReadSleb(int64_t* v);
  // A DWARF block: ULEB128 length, then that many bytes (returned in place).
  bool ReadBlock(const uint8_t** bytes, uint32_t* size);

 private:
  // Both targets are little-endian, as are the files they load.
  bool ReadFixed(void* out, size_t n);
  // LEB128; a signed value's sign bit is extended.
  bool ReadLeb(bool is_signed, uint64_t* v);

  const uint8_t* data_;
  size_t end_;
  size_t pos_;
};

// DW_EH_PE_*: the low nibble is the value's format, bits 4..6 how it applies, bit 7 an
// indirection.
constexpr uint8_t kPeAbsptr = 0x00;
constexpr uint8_t kPeOmit = 0xff;
constexpr uint8_t kPeIndirect = 0x80;
constexpr uint8_t kPeDatarelSdata4 = 0x3b;

// What the applications of a pointer encoding are relative to. `section_vaddr` is the address of
// the section being read (DW_EH_PE_pcrel, DW_EH_PE_aligned); `address_size` its file's.
struct PointerBases {
  uint64_t section_vaddr = 0;
  uint8_t address_size = 8;
  bool has_data_base = false;  // DW_EH_PE_datarel: only .eh_frame_hdr defines one (its start)
  uint64_t data_base = 0;
  bool has_func_base = false;  // DW_EH_PE_funcrel: the FDE's pc_begin, inside its program
  uint64_t func_base = 0;
};

// Reads a pointer in `encoding` and applies it. False on truncation, DW_EH_PE_omit, an unknown
// format or application, or DW_EH_PE_indirect (we cannot read the target's memory here).
bool ReadEncodedPointer(ByteReader* reader, uint8_t encoding, const PointerBases& bases,
                        uint64_t* value);
// Reads only the value's format (no application): FDE address ranges are encoded this way.
// DW_EH_PE_absptr and DW_EH_PE_signed values are address_size bytes.
bool ReadEncodedValue(ByteReader* reader, uint8_t encoding, uint8_t address_size, uint64_t* value);

// One entry's framing. For a zero-length entry `zero_terminator` is set and `end` is just past
// its length field.
struct EntryHeader {
  uint64_t start = 0;
  uint64_t end = 0;         // one past the entry
  uint64_t body = 0;        // just past the CIE id / CIE pointer
  bool zero_terminator = false;
  bool dwarf64 = false;
  bool is_cie = false;
  uint64_t cie_offset = 0;  // FDEs: the section offset of their CIE
};

bool ReadEntryHeader(const CfiSectionView& section, bool debug_frame, uint64_t offset,
                     EntryHeader* header);

struct Cie {
  uint8_t version = 0;
  uint64_t code_alignment = 0;
  int64_t data_alignment = 0;
  uint64_t return_address_register = 0;
  uint8_t fde_encoding = kPeAbsptr;  // .eh_frame 'R'
  uint8_t address_size = 8;          // .debug_frame v4; else the file's
  uint8_t segment_size = 0;          // .debug_frame v4
  bool has_augmentation_data = false;  // 'z': FDEs carry an augmentation length
  bool signal_frame = false;           // 'S'
  uint64_t instructions_begin = 0;     // section offsets of the initial instructions
  uint64_t instructions_end = 0;
};

struct Fde {
  uint64_t cie_offset = 0;
  uint64_t pc_begin = 0;
  uint64_t pc_end = 0;
  uint64_t instructions_begin = 0;
  uint64_t instructions_end = 0;
};

// Parses the CIE at `offset` (its header must say it is one).
bool ParseCie(const CfiSectionView& section, bool debug_frame, uint64_t offset, Cie* cie);
// Parses the body of the FDE whose header is `header`, given its already parsed CIE.
bool ParseFdeBody(const CfiSectionView& section, bool debug_frame, const EntryHeader& header,
                  const Cie& cie, Fde* fde);

}  // namespace cfi
}  // namespace droidheap

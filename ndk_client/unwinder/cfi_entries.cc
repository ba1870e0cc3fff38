#include "unwinder/cfi_entries.h"

#include <string.h>

namespace droidheap {
namespace cfi {
namespace {

constexpr uint8_t kPeFormatMask = 0x0f;
constexpr uint8_t kPeApplicationMask = 0x70;
constexpr uint8_t kPePcrel = 0x10;
constexpr uint8_t kPeTextrel = 0x20;
constexpr uint8_t kPeDatarel = 0x30;
constexpr uint8_t kPeFuncrel = 0x40;
constexpr uint8_t kPeAligned = 0x50;

// The CIE offset of an FDE whose CIE pointer leads outside the section: ParseCie rejects it, and a
// scan goes on to the next entry, whose framing is still sound.
constexpr uint64_t kNoCie = ~uint64_t{0};

// DW_EH_PE_aligned pointers start at the next pointer-aligned address (not offset).
bool AlignForPointer(ByteReader* reader, uint64_t section_vaddr, uint8_t address_size) {
  uint64_t misalignment = (section_vaddr + reader->pos()) % address_size;
  return reader->Skip(misalignment ? address_size - misalignment : 0);
}

uint64_t WrapAddress(uint64_t value, uint8_t address_size) {
  return address_size == 8 ? value : value & 0xffffffffu;
}

// The bytes of a pointer in `encoding` without applying it. Used to step over personality
// pointers, which are usually DW_EH_PE_indirect and which we never need.
bool SkipEncodedPointer(ByteReader* reader, uint8_t encoding, const CfiSectionView& section) {
  if ((encoding & kPeApplicationMask) == kPeAligned &&
      !AlignForPointer(reader, section.vaddr, section.address_size)) {
    return false;
  }
  uint64_t ignored;
  return ReadEncodedValue(reader, encoding, section.address_size, &ignored);
}

}  // namespace

bool ByteReader::ReadFixed(void* out, size_t n) {
  if (n > remaining()) return false;
  memcpy(out, data_ + pos_, n);
  pos_ += n;
  return true;
}

bool ByteReader::ReadUnsigned(size_t size, uint64_t* v) {
  if (size == 0 || size > 8 || size > remaining()) return false;
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i) value |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
  pos_ += size;
  *v = value;
  return true;
}

// At most 10 bytes (enough for 64 bits); bits past 64 are dropped rather than trusted.
bool ByteReader::ReadLeb(bool is_signed, uint64_t* v) {
  uint64_t value = 0;
  for (unsigned shift = 0; shift < 70; shift += 7) {
    uint8_t byte;
    if (!ReadU8(&byte)) return false;
    if (shift < 64) value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      if (is_signed && (byte & 0x40) && shift + 7 < 64) value |= ~uint64_t{0} << (shift + 7);
      *v = value;
      return true;
    }
  }
  return false;
}

bool ByteReader::ReadUleb(uint64_t* v) { return ReadLeb(false, v); }

bool ByteReader::ReadSleb(int64_t* v) {
  uint64_t value;
  if (!ReadLeb(true, &value)) return false;
  *v = static_cast<int64_t>(value);
  return true;
}

bool ByteReader::ReadBlock(const uint8_t** bytes, uint32_t* size) {
  uint64_t length;
  if (!ReadUleb(&length) || length > remaining() || length > UINT32_MAX) return false;
  *bytes = current();
  *size = static_cast<uint32_t>(length);
  pos_ += length;
  return true;
}

bool ReadEncodedValue(ByteReader* reader, uint8_t encoding, uint8_t address_size,
                      uint64_t* value) {
  auto sign_extend = [](uint64_t v, unsigned bits) {
    uint64_t sign = uint64_t{1} << (bits - 1);
    return (v ^ sign) - sign;
  };
  if (address_size != 4 && address_size != 8) return false;
  switch (encoding & kPeFormatMask) {
    case 0x00:  // DW_EH_PE_absptr
      return reader->ReadUnsigned(address_size, value);
    case 0x08:  // DW_EH_PE_signed: a pointer-sized signed value
      if (!reader->ReadUnsigned(address_size, value)) return false;
      *value = sign_extend(*value, 8 * address_size);
      return true;
    case 0x01: return reader->ReadUleb(value);
    case 0x02: return reader->ReadUnsigned(2, value);
    case 0x03: return reader->ReadUnsigned(4, value);
    case 0x04: return reader->ReadUnsigned(8, value);
    case 0x09: {
      int64_t s;
      if (!reader->ReadSleb(&s)) return false;
      *value = static_cast<uint64_t>(s);
      return true;
    }
    case 0x0a:
      if (!reader->ReadUnsigned(2, value)) return false;
      *value = sign_extend(*value, 16);
      return true;
    case 0x0b:
      if (!reader->ReadUnsigned(4, value)) return false;
      *value = sign_extend(*value, 32);
      return true;
    case 0x0c: return reader->ReadUnsigned(8, value);
    default: return false;
  }
}

bool ReadEncodedPointer(ByteReader* reader, uint8_t encoding, const PointerBases& bases,
                        uint64_t* value) {
  if (encoding == kPeOmit || (encoding & kPeIndirect)) return false;
  uint8_t application = encoding & kPeApplicationMask;
  if (application == kPeAligned &&
      !AlignForPointer(reader, bases.section_vaddr, bases.address_size)) {
    return false;
  }
  uint64_t field_address = bases.section_vaddr + reader->pos();
  uint64_t raw;
  if (!ReadEncodedValue(reader, encoding, bases.address_size, &raw)) return false;
  // Unsigned wrap-around, at the file's address size, is the intended arithmetic for negative
  // relative values.
  uint64_t base;
  switch (application) {
    case 0x00:
    case kPeAligned: base = 0; break;
    case kPePcrel: base = field_address; break;
    // No text base exists on our targets (libgcc uses 0 there too).
    case kPeTextrel: base = 0; break;
    case kPeDatarel:
      if (!bases.has_data_base) return false;
      base = bases.data_base;
      break;
    case kPeFuncrel:
      if (!bases.has_func_base) return false;
      base = bases.func_base;
      break;
    default: return false;
  }
  *value = WrapAddress(base + raw, bases.address_size);
  return true;
}

bool ReadEntryHeader(const CfiSectionView& section, bool debug_frame, uint64_t offset,
                     EntryHeader* header) {
  ByteReader reader(section.data, section.size, 0);
  if (!reader.SeekTo(offset)) return false;
  uint32_t length32;
  if (!reader.ReadU32(&length32)) return false;
  *header = EntryHeader();
  header->start = offset;
  if (length32 == 0) {
    header->zero_terminator = true;
    header->end = reader.pos();
    return true;
  }
  uint64_t length = length32;
  if (length32 == 0xffffffff) {
    header->dwarf64 = true;
    if (!reader.ReadU64(&length)) return false;
  } else if (length32 >= 0xfffffff0) {
    return false;  // reserved initial-length values
  }
  if (length > reader.remaining()) return false;
  header->end = reader.pos() + length;
  ByteReader body(section.data, header->end, reader.pos());
  uint64_t id_position = body.pos();
  if (!debug_frame) {
    // .eh_frame's CIE pointer is 4 bytes even in the 64-bit format (LSB), counted backwards from
    // its own position; 0 marks a CIE.
    uint32_t id;
    if (!body.ReadU32(&id)) return false;
    header->is_cie = id == 0;
    if (!header->is_cie) header->cie_offset = id <= id_position ? id_position - id : kNoCie;
  } else {
    uint64_t id;
    if (!body.ReadUnsigned(header->dwarf64 ? 8 : 4, &id)) return false;
    header->is_cie = id == (header->dwarf64 ? ~uint64_t{0} : 0xffffffffu);
    if (!header->is_cie) header->cie_offset = id < section.size ? id : kNoCie;
  }
  header->body = body.pos();
  return true;
}

bool ParseCie(const CfiSectionView& section, bool debug_frame, uint64_t offset, Cie* cie) {
  EntryHeader header;
  if (!ReadEntryHeader(section, debug_frame, offset, &header) || header.zero_terminator ||
      !header.is_cie) {
    return false;
  }
  ByteReader reader(section.data, header.end, header.body);
  *cie = Cie();
  if (!reader.ReadU8(&cie->version)) return false;
  if (cie->version != 1 && cie->version != 3 && cie->version != 4) return false;

  const char* augmentation = reinterpret_cast<const char*>(reader.current());
  size_t augmentation_length = strnlen(augmentation, reader.remaining());
  if (!reader.Skip(augmentation_length + 1)) return false;  // the string must be terminated

  // Pre-'z' GCC: an EH data pointer follows the string directly.
  if (augmentation_length == 2 && memcmp(augmentation, "eh", 2) == 0 &&
      !reader.Skip(section.address_size)) {
    return false;
  }
  cie->address_size = section.address_size;
  if (cie->version >= 4) {
    if (!reader.ReadU8(&cie->address_size) || !reader.ReadU8(&cie->segment_size)) return false;
    if ((cie->address_size != 4 && cie->address_size != 8) || cie->segment_size > 8) return false;
  }
  if (!reader.ReadUleb(&cie->code_alignment) || !reader.ReadSleb(&cie->data_alignment)) {
    return false;
  }
  if (cie->version == 1) {
    uint8_t ra;
    if (!reader.ReadU8(&ra)) return false;
    cie->return_address_register = ra;
  } else if (!reader.ReadUleb(&cie->return_address_register)) {
    return false;
  }

  if (augmentation_length > 0 && augmentation[0] == 'z') {
    uint64_t data_length;
    if (!reader.ReadUleb(&data_length) || data_length > reader.remaining()) return false;
    size_t data_end = reader.pos() + data_length;
    ByteReader data(section.data, data_end, reader.pos());
    cie->has_augmentation_data = true;
    for (size_t i = 1; i < augmentation_length; ++i) {
      uint8_t encoding;
      switch (augmentation[i]) {
        case 'L':  // LSDA encoding: only FDEs' augmentation data use it, and we skip that whole
          if (!data.ReadU8(&encoding)) return false;
          break;
        case 'P':
          if (!data.ReadU8(&encoding) || !SkipEncodedPointer(&data, encoding, section)) {
            return false;
          }
          break;
        case 'R':
          if (!data.ReadU8(&cie->fde_encoding)) return false;
          break;
        case 'S': cie->signal_frame = true; break;
        case 'B':  // AArch64 pointer authentication with the B key: the unwinder strips PAC bits
        case 'G':  // AArch64 MTE-tagged frame: nothing for an unwinder to do
          break;
        default:
          // An unknown letter's data has unknown size: the letters after it cannot be located.
          // That only matters if 'R' is among them.
          if (memchr(augmentation + i, 'R', augmentation_length - i)) return false;
          i = augmentation_length;
          break;
      }
    }
    if (!reader.SeekTo(data_end)) return false;
  } else if (augmentation_length > 0 &&
             !(augmentation_length == 2 && memcmp(augmentation, "eh", 2) == 0)) {
    return false;  // without 'z' an unknown augmentation's layout is unknown
  }
  cie->instructions_begin = reader.pos();
  cie->instructions_end = header.end;
  return true;
}

bool ParseFdeBody(const CfiSectionView& section, bool debug_frame, const EntryHeader& header,
                  const Cie& cie, Fde* fde) {
  ByteReader reader(section.data, header.end, header.body);
  *fde = Fde();
  fde->cie_offset = header.cie_offset;
  uint64_t range;
  if (!debug_frame) {
    PointerBases bases;
    bases.section_vaddr = section.vaddr;
    bases.address_size = section.address_size;
    if (!ReadEncodedPointer(&reader, cie.fde_encoding, bases, &fde->pc_begin) ||
        !ReadEncodedValue(&reader, cie.fde_encoding, section.address_size, &range)) {
      return false;
    }
    if (cie.has_augmentation_data) {
      uint64_t data_length;  // the LSDA pointer, which we do not need
      if (!reader.ReadUleb(&data_length) || !reader.Skip(data_length)) return false;
    }
  } else {
    if (!reader.Skip(cie.segment_size) || !reader.ReadUnsigned(cie.address_size, &fde->pc_begin) ||
        !reader.ReadUnsigned(cie.address_size, &range)) {
      return false;
    }
  }
  if (range > ~uint64_t{0} - fde->pc_begin) return false;
  fde->pc_end = fde->pc_begin + range;
  fde->instructions_begin = reader.pos();
  fde->instructions_end = header.end;
  return true;
}

}  // namespace cfi
}  // namespace droidheap

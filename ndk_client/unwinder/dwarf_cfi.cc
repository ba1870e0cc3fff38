#include "unwinder/dwarf_cfi.h"

#include <string.h>

#include <algorithm>
#include <unordered_map>

#include "unwinder/cfa_program.h"
#include "unwinder/cfi_entries.h"

namespace droidheap {
namespace {

// FDEs do not overlap in linked files, except that discarded functions' FDEs in .debug_frame all
// start at 0 and a section may hold two FDEs for one function (one of them unparsable to us). A
// lookup tries at most this many candidates, back from the last one starting at or before the pc.
constexpr int kMaxCandidates = 8;

constexpr size_t kHdrEntrySize = 8;

int32_t LoadS32(const uint8_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof(v));  // little-endian like the file
  return v;
}

}  // namespace

CfiTable::CfiTable(CfiSectionView eh_frame, CfiSectionView eh_frame_hdr, CfiSectionView debug_frame)
    : eh_frame_(eh_frame), eh_frame_hdr_(eh_frame_hdr), debug_frame_(debug_frame) {
  if (!eh_frame_.data) eh_frame_.size = 0;
  if (!eh_frame_hdr_.data) eh_frame_hdr_.size = 0;
  if (!debug_frame_.data) debug_frame_.size = 0;
  if (eh_frame_.size > 0 && !UseHdrTable()) index_ = IndexSection(/*debug_frame=*/false);
  if (debug_frame_.size > 0) debug_index_ = IndexSection(/*debug_frame=*/true);
}

bool CfiTable::empty() const {
  return hdr_count_ == 0 && index_.empty() && debug_index_.empty();
}

// .eh_frame_hdr (LSB): version 1, eh_frame_ptr_enc, fde_count_enc, table_enc, the encoded
// eh_frame_ptr and fde_count, then the table. Only the linker's usual table encoding is searched;
// a header that does not point at our .eh_frame is not believed.
bool CfiTable::UseHdrTable() {
  if (eh_frame_hdr_.size < 4) return false;
  const uint8_t* hdr = eh_frame_hdr_.data;
  uint8_t version = hdr[0], eh_frame_ptr_enc = hdr[1], fde_count_enc = hdr[2], table_enc = hdr[3];
  if (version != 1 || table_enc != cfi::kPeDatarelSdata4) return false;
  cfi::ByteReader reader(hdr, eh_frame_hdr_.size, 4);
  cfi::PointerBases bases;
  bases.section_vaddr = eh_frame_hdr_.vaddr;
  bases.address_size = eh_frame_hdr_.address_size;
  bases.has_data_base = true;
  bases.data_base = eh_frame_hdr_.vaddr;
  uint64_t eh_frame_ptr, fde_count;
  if (!cfi::ReadEncodedPointer(&reader, eh_frame_ptr_enc, bases, &eh_frame_ptr) ||
      eh_frame_ptr != eh_frame_.vaddr ||
      !cfi::ReadEncodedPointer(&reader, fde_count_enc, bases, &fde_count)) {
    return false;
  }
  if (fde_count == 0 || fde_count > reader.remaining() / kHdrEntrySize) return false;
  const uint8_t* table = reader.current();
  // A cheap check that the table is sorted at all; binary search copes with the rest, since every
  // candidate is parsed and checked to cover the pc.
  if (LoadS32(table) > LoadS32(table + (fde_count - 1) * kHdrEntrySize)) return false;
  hdr_table_ = table;
  hdr_count_ = static_cast<size_t>(fde_count);
  return true;
}

std::vector<CfiTable::FdeIndexEntry> CfiTable::IndexSection(bool debug_frame) const {
  const CfiSectionView& section = debug_frame ? debug_frame_ : eh_frame_;
  std::vector<FdeIndexEntry> index;
  // FDEs mostly share a few CIEs; version 0 marks one that failed to parse.
  std::unordered_map<uint64_t, cfi::Cie> cies;
  uint64_t offset = 0;
  while (offset < section.size) {
    cfi::EntryHeader header;
    // Without a valid length the next entry cannot be found: the rest is lost.
    if (!cfi::ReadEntryHeader(section, debug_frame, offset, &header)) break;
    offset = header.end;
    if (header.zero_terminator) {
      // .eh_frame ends at its terminator (LSB); in .debug_frame a zero length is only padding,
      // passed over here a word at a time without parsing it as an entry.
      if (!debug_frame) break;
      static constexpr uint8_t kZeroWord[4] = {};
      while (offset + 4 <= section.size && memcmp(section.data + offset, kZeroWord, 4) == 0) {
        offset += 4;
      }
      continue;
    }
    if (header.is_cie) continue;
    auto it = cies.find(header.cie_offset);
    if (it == cies.end()) {
      cfi::Cie cie;
      if (!cfi::ParseCie(section, debug_frame, header.cie_offset, &cie)) cie.version = 0;
      it = cies.emplace(header.cie_offset, cie).first;
    }
    cfi::Fde fde;
    if (it->second.version == 0 ||
        !cfi::ParseFdeBody(section, debug_frame, header, it->second, &fde) ||
        fde.pc_end == fde.pc_begin) {
      continue;
    }
    index.push_back({fde.pc_begin, fde.pc_end, header.start});
  }
  std::sort(index.begin(), index.end(), [](const FdeIndexEntry& a, const FdeIndexEntry& b) {
    return a.pc_begin < b.pc_begin;
  });
  index.shrink_to_fit();
  return index;
}

bool CfiTable::FindRow(uint64_t elf_pc, CfiRow* row) const {
  // .eh_frame first: it is what the program itself unwinds with, and is always complete.
  if (hdr_table_ ? FindRowViaHdrTable(elf_pc, row)
                 : FindRowViaIndex(index_, /*debug_frame=*/false, elf_pc, row)) {
    return true;
  }
  return FindRowViaIndex(debug_index_, /*debug_frame=*/true, elf_pc, row);
}

bool CfiTable::FindRowViaHdrTable(uint64_t pc, CfiRow* row) const {
  // Entries are (initial location, FDE address), each relative to the header's address.
  auto location = [this](size_t i) {
    return eh_frame_hdr_.vaddr + static_cast<uint64_t>(LoadS32(hdr_table_ + i * kHdrEntrySize));
  };
  size_t low = 0, high = hdr_count_;  // first entry starting after the pc
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (location(mid) <= pc) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  // Only entries sharing the last start are tried: the linker's table has no nested ranges, and a
  // pc between functions then costs one FDE parse.
  for (int n = 0; n < kMaxCandidates && low > 0; ++n) {
    --low;
    if (n > 0 && location(low) != location(low + n)) break;
    uint64_t fde_address = eh_frame_hdr_.vaddr +
        static_cast<uint64_t>(LoadS32(hdr_table_ + low * kHdrEntrySize + 4));
    uint64_t fde_offset = fde_address - eh_frame_.vaddr;
    if (fde_offset < eh_frame_.size && RowFromFde(/*debug_frame=*/false, fde_offset, pc, row)) {
      return true;
    }
  }
  return false;
}

bool CfiTable::FindRowViaIndex(const std::vector<FdeIndexEntry>& index, bool debug_frame,
                               uint64_t pc, CfiRow* row) const {
  auto it = std::upper_bound(index.begin(), index.end(), pc,
                             [](uint64_t value, const FdeIndexEntry& e) {
                               return value < e.pc_begin;
                             });
  for (int n = 0; n < kMaxCandidates && it != index.begin(); ++n) {
    --it;
    if (pc < it->pc_end && RowFromFde(debug_frame, it->fde_offset, pc, row)) return true;
  }
  return false;
}

bool CfiTable::RowFromFde(bool debug_frame, uint64_t fde_offset, uint64_t pc, CfiRow* row) const {
  const CfiSectionView& section = debug_frame ? debug_frame_ : eh_frame_;
  cfi::EntryHeader header;
  cfi::Cie cie;
  cfi::Fde fde;
  if (!cfi::ReadEntryHeader(section, debug_frame, fde_offset, &header) ||
      header.zero_terminator || header.is_cie ||
      !cfi::ParseCie(section, debug_frame, header.cie_offset, &cie) ||
      !cfi::ParseFdeBody(section, debug_frame, header, cie, &fde)) {
    return false;
  }
  if (pc < fde.pc_begin || pc >= fde.pc_end) return false;
  // The unwinder indexes its register file with the return-address column.
  if (cie.return_address_register >= kMaxRegisters) return false;
  if (!cfi::RunCfaPrograms(section, debug_frame, cie, fde, pc, row)) return false;
  row->return_address_register = static_cast<uint32_t>(cie.return_address_register);
  row->signal_frame = cie.signal_frame;
  return true;
}

}  // namespace droidheap

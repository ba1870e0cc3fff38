#include "unwinder/cfi_file.h"

#include <elf.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "unwinder/elf_info.h"

namespace droidheap {
namespace {

// The ELF structures of one file class, and its address size.
struct Elf32 {
  using Ehdr = Elf32_Ehdr;
  using Phdr = Elf32_Phdr;
  using Shdr = Elf32_Shdr;
  static constexpr uint8_t kAddressSize = 4;
};
struct Elf64 {
  using Ehdr = Elf64_Ehdr;
  using Phdr = Elf64_Phdr;
  using Shdr = Elf64_Shdr;
  static constexpr uint8_t kAddressSize = 8;
};

// Section names: linkers write a few KiB of them; past this the headers are not believed.
constexpr uint64_t kMaxSectionNames = 1 << 20;
// The longest .ARM.extab entry: a personality routine's word, then a word holding a count of
// up to 255 more words of instructions.
constexpr uint64_t kMaxExtabEntry = 8 + 255 * 4;

// Where one section lies in the ELF file, and its address.
struct Place {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t vaddr = 0;
};

struct Places {
  Place eh_frame;
  Place eh_frame_hdr;
  Place debug_frame;
};

template <typename Elf>
void FindSectionsByHeader(const ElfBytes& file, const typename Elf::Ehdr& ehdr, Places* out) {
  using Shdr = typename Elf::Shdr;
  if (ehdr.e_shentsize != sizeof(Shdr) || ehdr.e_shnum == 0 || ehdr.e_shstrndx >= ehdr.e_shnum) {
    return;
  }
  std::vector<Shdr> headers(ehdr.e_shnum);  // at most 65535 of 64 bytes
  if (!file.Read(ehdr.e_shoff, headers.data(), headers.size() * sizeof(Shdr))) return;
  const Shdr& names_header = headers[ehdr.e_shstrndx];
  if (names_header.sh_type == SHT_NOBITS || names_header.sh_size > kMaxSectionNames) return;
  std::vector<char> names(static_cast<size_t>(names_header.sh_size));
  if (!file.Read(names_header.sh_offset, names.data(), names.size())) return;
  for (const Shdr& shdr : headers) {
    if (shdr.sh_type == SHT_NOBITS || shdr.sh_name >= names.size()) continue;
    const char* name = names.data() + shdr.sh_name;
    const size_t max_length = names.size() - shdr.sh_name;
    if (strnlen(name, max_length) == max_length) continue;  // not terminated inside the table
    const Place place{shdr.sh_offset, shdr.sh_size, shdr.sh_addr};
    if (strcmp(name, ".eh_frame") == 0) {
      out->eh_frame = place;
    } else if (strcmp(name, ".eh_frame_hdr") == 0) {
      out->eh_frame_hdr = place;
    } else if (strcmp(name, ".debug_frame") == 0) {
      out->debug_frame = place;
    }
  }
}

template <typename Elf>
std::vector<typename Elf::Phdr> ReadProgramHeaders(const ElfBytes& file,
                                                   const typename Elf::Ehdr& ehdr) {
  using Phdr = typename Elf::Phdr;
  std::vector<Phdr> headers;
  if (ehdr.e_phentsize != sizeof(Phdr)) return headers;
  headers.resize(ehdr.e_phnum);  // at most 65535 of 56 bytes
  if (!file.Read(ehdr.e_phoff, headers.data(), headers.size() * sizeof(Phdr))) headers.clear();
  return headers;
}

// Without section headers (stripped with --strip-section-headers, some vendor files): the loader's
// PT_GNU_EH_FRAME gives .eh_frame_hdr, whose eh_frame_ptr locates .eh_frame. Its size is unknown;
// the table then reads up to the end of the containing load segment, or as far as `max_size`.
template <typename Elf>
void FindSectionsBySegment(const ElfBytes& file, const typename Elf::Ehdr& ehdr,
                           uint64_t max_size, Places* out) {
  using Phdr = typename Elf::Phdr;
  const std::vector<Phdr> headers = ReadProgramHeaders<Elf>(file, ehdr);
  auto hdr_segment = std::find_if(headers.begin(), headers.end(),
                                  [](const Phdr& p) { return p.p_type == PT_GNU_EH_FRAME; });
  if (hdr_segment == headers.end()) return;
  out->eh_frame_hdr = {hdr_segment->p_offset, hdr_segment->p_filesz, hdr_segment->p_vaddr};
  // eh_frame_ptr: version byte, its encoding (pcrel|sdata4 in every linker's output), then it.
  uint8_t start[4];
  int32_t relative = 0;
  if (!file.Read(hdr_segment->p_offset, start, sizeof(start)) || start[0] != 1 ||
      start[1] != 0x1b || !file.Read(hdr_segment->p_offset + 4, &relative, sizeof(relative))) {
    return;
  }
  uint64_t eh_frame_vaddr = hdr_segment->p_vaddr + 4 + static_cast<int64_t>(relative);
  if (Elf::kAddressSize == 4) eh_frame_vaddr &= 0xffffffffu;
  for (const Phdr& p : headers) {
    if (p.p_type == PT_LOAD && eh_frame_vaddr >= p.p_vaddr &&
        eh_frame_vaddr < p.p_vaddr + p.p_filesz) {
      const uint64_t into = eh_frame_vaddr - p.p_vaddr;
      out->eh_frame = {p.p_offset + into, std::min<uint64_t>(p.p_filesz - into, max_size),
                       eh_frame_vaddr};
    }
  }
}

template <typename Elf>
Places FindSections(const ElfBytes& file, uint64_t max_size) {
  typename Elf::Ehdr ehdr{};
  Places places;
  if (!file.Read(0, &ehdr, sizeof(ehdr))) return places;
  FindSectionsByHeader<Elf>(file, ehdr, &places);
  if (places.eh_frame.size == 0 && places.debug_frame.size == 0) {
    FindSectionsBySegment<Elf>(file, ehdr, max_size, &places);
  }
  return places;
}

// Reads the section at `place` into `bytes`; its view there, or an empty one.
CfiSectionView ReadSection(const ElfBytes& file, const Place& place, uint8_t address_size,
                           ReadAllowance* allowance, std::vector<uint8_t>* bytes) {
  if (place.size == 0 || !file.ReadTable(place.offset, place.size, allowance, bytes)) return {};
  return {bytes->data(), bytes->size(), place.vaddr, address_size};
}

// The file offset of ELF address `vaddr` through the PT_LOAD segments; false outside them.
bool OffsetOf(const std::vector<ArmExidxTable::Segment>& loads, uint64_t vaddr,
              uint64_t* offset) {
  for (const ArmExidxTable::Segment& s : loads) {
    if (vaddr >= s.vaddr && vaddr - s.vaddr < s.file_size) {
      *offset = s.offset + (vaddr - s.vaddr);
      return true;
    }
  }
  return false;
}

// EHABI's table, through the program headers: the loader's view, which is what the unwinder needs
// (section headers may be stripped). Its prel31 references are ELF addresses, which the PT_LOAD
// segments translate into file offsets. The table and the .ARM.extab entries it names are read as
// one range (linkers put the two side by side); when that range is not allowed, the table alone.
std::unique_ptr<ArmExidxTable> ReadArmExidx(const ElfBytes& file, ReadAllowance* allowance,
                                            std::vector<uint8_t>* bytes) {
  constexpr uint32_t kPtArmExidx = 0x70000001;  // PT_ARM_EXIDX, absent from some elf.h
  Elf32_Ehdr ehdr{};
  if (!file.Read(0, &ehdr, sizeof(ehdr)) || ehdr.e_ident[EI_CLASS] != ELFCLASS32 ||
      ehdr.e_machine != EM_ARM) {
    return nullptr;
  }
  std::vector<ArmExidxTable::Segment> loads;
  Elf32_Phdr exidx{};
  bool found = false;
  for (const Elf32_Phdr& p : ReadProgramHeaders<Elf32>(file, ehdr)) {
    if (p.p_type == PT_LOAD) {
      loads.push_back({p.p_offset, p.p_vaddr, p.p_filesz, (p.p_flags & PF_X) != 0});
    } else if (p.p_type == kPtArmExidx) {
      exidx = p;
      found = true;
    }
  }
  if (!found || !file.ReadTable(exidx.p_offset, exidx.p_filesz, allowance, bytes)) return nullptr;
  uint64_t begin = exidx.p_offset, end = exidx.p_offset + exidx.p_filesz;
  for (size_t at = 4; at + 4 <= bytes->size(); at += 8) {
    uint32_t word;
    memcpy(&word, bytes->data() + at, sizeof(word));
    uint64_t offset;
    if (word == 1 || (word & 0x80000000u) != 0 ||  // EXIDX_CANTUNWIND, an inline entry
        !OffsetOf(loads, Prel31(word, static_cast<uint32_t>(exidx.p_vaddr + at)), &offset)) {
      continue;
    }
    begin = std::min(begin, offset);
    end = std::max(end, std::min(offset + kMaxExtabEntry, file.location.size));
  }
  uint64_t data_offset = exidx.p_offset;
  if (begin < exidx.p_offset || end > exidx.p_offset + exidx.p_filesz) {
    // Charged for what it adds to the table already read, which it replaces.
    std::vector<uint8_t> both;
    ReadAllowance both_allowance(allowance->remaining() + exidx.p_filesz);
    if (file.ReadTable(begin, end - begin, &both_allowance, &both)) {
      allowance->Take(end - begin - exidx.p_filesz);
      bytes->swap(both);
      data_offset = begin;
    }
  }
  return std::unique_ptr<ArmExidxTable>(
      new ArmExidxTable(bytes->data(), bytes->size(), exidx.p_offset, exidx.p_filesz,
                        exidx.p_vaddr, std::move(loads), data_offset));
}

}  // namespace

std::unique_ptr<CfiFile> CfiFile::Open(const std::string& path, const MappedFileId& id,
                                       const ElfLocation& location, ReadAllowance* allowance) {
  uint64_t file_size;
  const int fd = OpenMappedFile(path, id, &file_size);
  if (fd < 0) return nullptr;
  std::unique_ptr<CfiFile> file;
  const ElfBytes bytes{fd, location};
  // e_ident and e_machine lie at the same offsets in both classes.
  Elf32_Ehdr start{};
  if (location.offset <= file_size && location.size <= file_size - location.offset &&
      bytes.Read(0, &start, sizeof(start)) && IsKnownElf(start.e_ident, start.e_machine)) {
    file.reset(new CfiFile());
    const bool is_64 = start.e_ident[EI_CLASS] == ELFCLASS64;
    const uint8_t address_size = is_64 ? Elf64::kAddressSize : Elf32::kAddressSize;
    const Places places = is_64 ? FindSections<Elf64>(bytes, allowance->remaining())
                                : FindSections<Elf32>(bytes, allowance->remaining());
    // The search table first and .debug_frame last: without the table, .eh_frame is indexed in
    // one scan; without .debug_frame, only code that .eh_frame leaves out lacks rules.
    const CfiSectionView hdr =
        ReadSection(bytes, places.eh_frame_hdr, address_size, allowance, &file->eh_frame_hdr_);
    const CfiSectionView eh_frame =
        ReadSection(bytes, places.eh_frame, address_size, allowance, &file->eh_frame_);
    const CfiSectionView debug_frame =
        ReadSection(bytes, places.debug_frame, address_size, allowance, &file->debug_frame_);
    file->table_.reset(new CfiTable(eh_frame, hdr, debug_frame));
    file->exidx_ = ReadArmExidx(bytes, allowance, &file->arm_tables_);
  }
  close(fd);
  return file;
}

size_t CfiFile::memory_bytes() const {
  return sizeof(*this) + eh_frame_.capacity() + eh_frame_hdr_.capacity() +
         debug_frame_.capacity() + arm_tables_.capacity() + sizeof(CfiTable) +
         table_->memory_bytes() + (exidx_ ? sizeof(ArmExidxTable) + exidx_->memory_bytes() : 0);
}

}  // namespace droidheap

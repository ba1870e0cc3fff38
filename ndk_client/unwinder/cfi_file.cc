#include "unwinder/cfi_file.h"

#include <elf.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

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

// Views of a file's bytes, every one checked to lie inside the file.
struct FileView {
  const uint8_t* data;
  size_t size;

  bool Contains(uint64_t offset, uint64_t length) const {
    return offset <= size && length <= size - offset;
  }
  template <typename T>
  bool Read(uint64_t offset, T* out) const {
    if (!Contains(offset, sizeof(T))) return false;
    memcpy(out, data + offset, sizeof(T));
    return true;
  }
};

struct Sections {
  CfiSectionView eh_frame;
  CfiSectionView eh_frame_hdr;
  CfiSectionView debug_frame;
};

template <typename Elf>
CfiSectionView ViewOf(const FileView& file, uint64_t offset, uint64_t size, uint64_t vaddr) {
  if (!file.Contains(offset, size)) return {};
  return {file.data + offset, static_cast<size_t>(size), vaddr, Elf::kAddressSize};
}

template <typename Elf>
void FindSectionsByHeader(const FileView& file, const typename Elf::Ehdr& ehdr, Sections* out) {
  using Shdr = typename Elf::Shdr;
  if (ehdr.e_shentsize != sizeof(Shdr) || ehdr.e_shnum == 0 || ehdr.e_shstrndx >= ehdr.e_shnum ||
      !file.Contains(ehdr.e_shoff, uint64_t{ehdr.e_shnum} * sizeof(Shdr))) {
    return;
  }
  Shdr names;
  file.Read(ehdr.e_shoff + uint64_t{ehdr.e_shstrndx} * sizeof(Shdr), &names);
  for (uint16_t i = 0; i < ehdr.e_shnum; ++i) {
    Shdr shdr;
    file.Read(ehdr.e_shoff + uint64_t{i} * sizeof(Shdr), &shdr);
    if (shdr.sh_type == SHT_NOBITS || shdr.sh_name >= names.sh_size) continue;
    uint64_t name_offset = names.sh_offset + shdr.sh_name;
    if (!file.Contains(name_offset, 1)) continue;
    const char* name = reinterpret_cast<const char*>(file.data + name_offset);
    size_t max_length = static_cast<size_t>(
        std::min<uint64_t>(file.size - name_offset, names.sh_size - shdr.sh_name));
    size_t length = strnlen(name, max_length);
    if (length == max_length) continue;  // not terminated inside the string table
    CfiSectionView view = ViewOf<Elf>(file, shdr.sh_offset, shdr.sh_size, shdr.sh_addr);
    if (strcmp(name, ".eh_frame") == 0) {
      out->eh_frame = view;
    } else if (strcmp(name, ".eh_frame_hdr") == 0) {
      out->eh_frame_hdr = view;
    } else if (strcmp(name, ".debug_frame") == 0) {
      out->debug_frame = view;
    }
  }
}

// Without section headers (stripped with --strip-section-headers, some vendor files): the loader's
// PT_GNU_EH_FRAME gives .eh_frame_hdr, whose eh_frame_ptr locates .eh_frame. Its size is unknown;
// the table then reads up to the end of the containing load segment.
template <typename Elf>
void FindSectionsBySegment(const FileView& file, const typename Elf::Ehdr& ehdr, Sections* out) {
  using Phdr = typename Elf::Phdr;
  if (ehdr.e_phentsize != sizeof(Phdr) ||
      !file.Contains(ehdr.e_phoff, uint64_t{ehdr.e_phnum} * sizeof(Phdr))) {
    return;
  }
  Phdr hdr_segment = {};
  bool found = false;
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    Phdr p;
    file.Read(ehdr.e_phoff + uint64_t{i} * sizeof(Phdr), &p);
    if (p.p_type == PT_GNU_EH_FRAME) {
      hdr_segment = p;
      found = true;
    }
  }
  if (!found) return;
  out->eh_frame_hdr =
      ViewOf<Elf>(file, hdr_segment.p_offset, hdr_segment.p_filesz, hdr_segment.p_vaddr);
  // eh_frame_ptr: version byte, its encoding (pcrel|sdata4 in every linker's output), then it.
  uint8_t version = 0, encoding = 0;
  int32_t relative = 0;
  if (!file.Read(hdr_segment.p_offset, &version) || version != 1 ||
      !file.Read(hdr_segment.p_offset + 1, &encoding) || encoding != 0x1b ||
      !file.Read(hdr_segment.p_offset + 4, &relative)) {
    return;
  }
  uint64_t eh_frame_vaddr = hdr_segment.p_vaddr + 4 + static_cast<int64_t>(relative);
  if (Elf::kAddressSize == 4) eh_frame_vaddr &= 0xffffffffu;
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    Phdr p;
    file.Read(ehdr.e_phoff + uint64_t{i} * sizeof(Phdr), &p);
    if (p.p_type == PT_LOAD && eh_frame_vaddr >= p.p_vaddr &&
        eh_frame_vaddr < p.p_vaddr + p.p_filesz) {
      uint64_t offset = p.p_offset + (eh_frame_vaddr - p.p_vaddr);
      out->eh_frame = ViewOf<Elf>(file, offset, p.p_filesz - (eh_frame_vaddr - p.p_vaddr),
                                  eh_frame_vaddr);
    }
  }
}

template <typename Elf>
Sections FindSections(const FileView& file) {
  typename Elf::Ehdr ehdr{};
  Sections sections;
  if (!file.Read(0, &ehdr)) return sections;
  FindSectionsByHeader<Elf>(file, ehdr, &sections);
  if (sections.eh_frame.size == 0 && sections.debug_frame.size == 0) {
    FindSectionsBySegment<Elf>(file, ehdr, &sections);
  }
  return sections;
}

// EHABI's table, through the program headers: the loader's view, which is what the unwinder needs
// (section headers may be stripped). Its prel31 references are ELF addresses, which the PT_LOAD
// segments translate into file offsets.
std::unique_ptr<ArmExidxTable> FindArmExidx(const FileView& file) {
  constexpr uint32_t kPtArmExidx = 0x70000001;  // PT_ARM_EXIDX, absent from some elf.h
  Elf32_Ehdr ehdr{};
  if (!file.Read(0, &ehdr) || ehdr.e_ident[EI_CLASS] != ELFCLASS32 || ehdr.e_machine != EM_ARM ||
      ehdr.e_phentsize != sizeof(Elf32_Phdr) ||
      !file.Contains(ehdr.e_phoff, uint64_t{ehdr.e_phnum} * sizeof(Elf32_Phdr))) {
    return nullptr;
  }
  std::vector<ArmExidxTable::Segment> loads;
  Elf32_Phdr exidx{};
  bool found = false;
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    Elf32_Phdr p;
    file.Read(ehdr.e_phoff + uint64_t{i} * sizeof(Elf32_Phdr), &p);
    if (p.p_type == PT_LOAD) {
      loads.push_back({p.p_offset, p.p_vaddr, p.p_filesz, (p.p_flags & PF_X) != 0});
    } else if (p.p_type == kPtArmExidx) {
      exidx = p;
      found = true;
    }
  }
  if (!found) return nullptr;
  return std::unique_ptr<ArmExidxTable>(new ArmExidxTable(
      file.data, file.size, exidx.p_offset, exidx.p_filesz, exidx.p_vaddr, std::move(loads)));
}

}  // namespace

std::unique_ptr<CfiFile> CfiFile::Open(const std::string& path, const MappedFileId& id,
                                       const ElfLocation& location) {
  uint64_t file_size;
  int fd = OpenMappedFile(path, id, &file_size);
  if (fd < 0) return nullptr;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t skip = location.offset % page;
  const uint64_t length = skip + location.size;
  void* mapped = MAP_FAILED;
  if (location.size >= sizeof(Elf64_Ehdr) && location.offset <= file_size &&
      location.size <= file_size - location.offset && length <= SIZE_MAX) {
    mapped = mmap(nullptr, static_cast<size_t>(length), PROT_READ, MAP_PRIVATE, fd,
                  static_cast<off_t>(location.offset - skip));
  }
  close(fd);
  if (mapped == MAP_FAILED) return nullptr;
  std::unique_ptr<CfiFile> file(
      new CfiFile(mapped, static_cast<size_t>(length), static_cast<size_t>(skip)));

  FileView view{file->data_, file->size_};
  // e_ident and e_machine lie at the same offsets in both classes.
  Elf32_Ehdr start{};
  view.Read(0, &start);
  if (!IsKnownElf(start.e_ident, start.e_machine)) return nullptr;
  Sections sections = start.e_ident[EI_CLASS] == ELFCLASS64 ? FindSections<Elf64>(view)
                                                             : FindSections<Elf32>(view);
  file->table_.reset(
      new CfiTable(sections.eh_frame, sections.eh_frame_hdr, sections.debug_frame));
  file->exidx_ = FindArmExidx(view);
  return file;
}

CfiFile::~CfiFile() { munmap(mapped_, mapped_size_); }

}  // namespace droidheap

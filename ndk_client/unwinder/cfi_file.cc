#include "unwinder/cfi_file.h"

#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace droidheap {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#endif

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

CfiSectionView ViewOf(const FileView& file, uint64_t offset, uint64_t size, uint64_t vaddr) {
  if (!file.Contains(offset, size)) return {};
  return {file.data + offset, static_cast<size_t>(size), vaddr};
}

void FindSectionsByHeader(const FileView& file, const Elf64_Ehdr& ehdr, Sections* out) {
  if (ehdr.e_shentsize != sizeof(Elf64_Shdr) || ehdr.e_shnum == 0 ||
      ehdr.e_shstrndx >= ehdr.e_shnum ||
      !file.Contains(ehdr.e_shoff, uint64_t{ehdr.e_shnum} * sizeof(Elf64_Shdr))) {
    return;
  }
  Elf64_Shdr names;
  file.Read(ehdr.e_shoff + uint64_t{ehdr.e_shstrndx} * sizeof(Elf64_Shdr), &names);
  for (uint16_t i = 0; i < ehdr.e_shnum; ++i) {
    Elf64_Shdr shdr;
    file.Read(ehdr.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr), &shdr);
    if (shdr.sh_type == SHT_NOBITS || shdr.sh_name >= names.sh_size) continue;
    uint64_t name_offset = names.sh_offset + shdr.sh_name;
    if (!file.Contains(name_offset, 1)) continue;
    const char* name = reinterpret_cast<const char*>(file.data + name_offset);
    size_t max_length = static_cast<size_t>(
        std::min<uint64_t>(file.size - name_offset, names.sh_size - shdr.sh_name));
    size_t length = strnlen(name, max_length);
    if (length == max_length) continue;  // not terminated inside the string table
    CfiSectionView view = ViewOf(file, shdr.sh_offset, shdr.sh_size, shdr.sh_addr);
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
void FindSectionsBySegment(const FileView& file, const Elf64_Ehdr& ehdr, Sections* out) {
  if (ehdr.e_phentsize != sizeof(Elf64_Phdr) ||
      !file.Contains(ehdr.e_phoff, uint64_t{ehdr.e_phnum} * sizeof(Elf64_Phdr))) {
    return;
  }
  Elf64_Phdr hdr_segment = {};
  bool found = false;
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    Elf64_Phdr p;
    file.Read(ehdr.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr), &p);
    if (p.p_type == PT_GNU_EH_FRAME) {
      hdr_segment = p;
      found = true;
    }
  }
  if (!found) return;
  out->eh_frame_hdr = ViewOf(file, hdr_segment.p_offset, hdr_segment.p_filesz, hdr_segment.p_vaddr);
  // eh_frame_ptr: version byte, its encoding (pcrel|sdata4 in every linker's output), then it.
  uint8_t version = 0, encoding = 0;
  int32_t relative = 0;
  if (!file.Read(hdr_segment.p_offset, &version) || version != 1 ||
      !file.Read(hdr_segment.p_offset + 1, &encoding) || encoding != 0x1b ||
      !file.Read(hdr_segment.p_offset + 4, &relative)) {
    return;
  }
  uint64_t eh_frame_vaddr = hdr_segment.p_vaddr + 4 + static_cast<int64_t>(relative);
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    Elf64_Phdr p;
    file.Read(ehdr.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr), &p);
    if (p.p_type == PT_LOAD && eh_frame_vaddr >= p.p_vaddr &&
        eh_frame_vaddr < p.p_vaddr + p.p_filesz) {
      uint64_t offset = p.p_offset + (eh_frame_vaddr - p.p_vaddr);
      out->eh_frame = ViewOf(file, offset, p.p_filesz - (eh_frame_vaddr - p.p_vaddr),
                             eh_frame_vaddr);
    }
  }
}

}  // namespace

std::unique_ptr<CfiFile> CfiFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  void* mapped = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    mapped = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  close(fd);
  if (mapped == MAP_FAILED) return nullptr;
  std::unique_ptr<CfiFile> file(
      new CfiFile(static_cast<const uint8_t*>(mapped), static_cast<size_t>(st.st_size)));

  FileView view{file->data_, file->size_};
  Elf64_Ehdr ehdr;
  view.Read(0, &ehdr);
  if (memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_ident[EI_DATA] != ELFDATA2LSB || ehdr.e_machine != kMachine) {
    return nullptr;
  }
  Sections sections;
  FindSectionsByHeader(view, ehdr, &sections);
  if (sections.eh_frame.size == 0 && sections.debug_frame.size == 0) {
    FindSectionsBySegment(view, ehdr, &sections);
  }
  file->table_.reset(
      new CfiTable(sections.eh_frame, sections.eh_frame_hdr, sections.debug_frame));
  return file;
}

CfiFile::~CfiFile() { munmap(const_cast<uint8_t*>(data_), size_); }

}  // namespace droidheap

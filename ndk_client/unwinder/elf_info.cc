#include "unwinder/elf_info.h"

#include <elf.h>
#include <string.h>
#include <unistd.h>

#include "common/platform.h"
#include "unwinder/registers.h"

namespace droidheap {
namespace {

// The ELF structures of one file class.
struct Elf32 {
  using Ehdr = Elf32_Ehdr;
  using Phdr = Elf32_Phdr;
};
struct Elf64 {
  using Ehdr = Elf64_Ehdr;
  using Phdr = Elf64_Phdr;
};

bool ReadExact(int fd, uint64_t offset, void* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, static_cast<char*>(out) + done, size - done,
                      static_cast<off_t>(offset + done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string FindBuildId(int fd, uint64_t offset, uint64_t size) {
  constexpr uint64_t kMaxNotes = 64 * 1024;
  if (size > kMaxNotes) return {};
  std::string notes(size, '\0');
  if (!ReadExact(fd, offset, &notes[0], size)) return {};
  uint64_t pos = 0;
  // Elf32_Nhdr and Elf64_Nhdr are the same three 32-bit words.
  while (pos + sizeof(Elf64_Nhdr) <= size) {
    Elf64_Nhdr header;
    memcpy(&header, notes.data() + pos, sizeof(header));
    uint64_t name_start = pos + sizeof(header);
    uint64_t desc_start = name_start + ((header.n_namesz + 3u) & ~3u);
    uint64_t next = desc_start + ((header.n_descsz + 3u) & ~3u);
    if (next > size || desc_start + header.n_descsz > size) break;
    if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 &&
        memcmp(notes.data() + name_start, "GNU", 4) == 0) {
      return notes.substr(desc_start, header.n_descsz);
    }
    pos = next;
  }
  return {};
}

template <typename Elf>
void ReadHeaders(int fd, ElfInfo* info) {
  typename Elf::Ehdr ehdr;
  if (!ReadExact(fd, 0, &ehdr, sizeof(ehdr)) || ehdr.e_phentsize != sizeof(typename Elf::Phdr) ||
      ehdr.e_phnum == 0 || ehdr.e_phnum >= 4096) {
    return;
  }
  std::vector<typename Elf::Phdr> phdrs(ehdr.e_phnum);
  if (!ReadExact(fd, ehdr.e_phoff, phdrs.data(), phdrs.size() * sizeof(typename Elf::Phdr))) {
    return;
  }
  info->valid = true;
  info->machine = ehdr.e_machine;
  for (const typename Elf::Phdr& p : phdrs) {
    if (p.p_type == PT_LOAD) {
      info->loads.push_back(
          {p.p_offset, p.p_vaddr, p.p_filesz, p.p_align, (p.p_flags & PF_X) != 0});
    } else if (p.p_type == PT_NOTE && info->build_id.empty()) {
      info->build_id = FindBuildId(fd, p.p_offset, p.p_filesz);
    }
  }
}

}  // namespace

bool ElfInfo::HasCodeIn(uint64_t file_offset, uint64_t size) const {
  for (const Segment& s : loads) {
    if (s.executable && s.offset < file_offset + size && s.offset + s.file_size > file_offset) {
      return true;
    }
  }
  return false;
}

uint64_t ElfInfo::LoadBiasAt(uint64_t file_offset, bool executable) const {
  // lld starts each segment on a new page in memory but not in the file: the read-only segment
  // and the code after it share the file's first page, and both mappings say offset 0. The
  // mapping's permissions tell which of the two it is.
  const Segment* containing = nullptr;
  for (const Segment& s : loads) {
    uint64_t aligned = s.align > 1 ? s.offset & ~(s.align - 1) : s.offset;
    if (file_offset < aligned || file_offset >= s.offset + s.file_size) continue;
    if (s.executable == executable) return s.vaddr - s.offset;
    if (containing == nullptr) containing = &s;
  }
  if (containing != nullptr) return containing->vaddr - containing->offset;
  for (const Segment& s : loads) {
    if (s.executable) return s.vaddr - s.offset;
  }
  return 0;
}

bool IsKnownElf(const unsigned char* ident, uint16_t machine) {
  if (memcmp(ident, ELFMAG, SELFMAG) != 0 || ident[EI_DATA] != ELFDATA2LSB) return false;
  for (const RegisterLayout& layout : kLayouts) {
    if (layout.elf_machine == machine &&
        ident[EI_CLASS] == (layout.word_size == 8 ? ELFCLASS64 : ELFCLASS32)) {
      return true;
    }
  }
  return false;
}

ElfInfo ReadElfInfo(const std::string& path, const MappedFileId& id) {
  ElfInfo info;
  int fd = OpenMappedFile(path, id, nullptr);
  if (fd < 0) return info;
  // e_ident and e_machine lie at the same offsets in both classes.
  Elf32_Ehdr start;
  if (ReadExact(fd, 0, &start, sizeof(start)) && IsKnownElf(start.e_ident, start.e_machine)) {
    if (start.e_ident[EI_CLASS] == ELFCLASS64) {
      ReadHeaders<Elf64>(fd, &info);
    } else {
      ReadHeaders<Elf32>(fd, &info);
    }
  }
  close(fd);
  return info;
}

ElfCache::Entry& ElfCache::Lookup(const std::string& path, const MappedFileId& id) {
  auto key = std::make_tuple(path, id);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_.emplace(key, Entry()).first;
    it->second.info = ReadElfInfo(path, id);
  }
  return it->second;
}

const ElfInfo& ElfCache::Get(const std::string& path, const MappedFileId& id) {
  return Lookup(path, id).info;
}

const CfiFile* ElfCache::LoadCfi(const std::string& path, const MappedFileId& id) {
  Entry& entry = Lookup(path, id);
  if (!entry.cfi_loaded) {
    entry.cfi_loaded = true;
    if (entry.info.valid) entry.cfi = CfiFile::Open(path, id);
  }
  return entry.cfi.get();
}

const CfiTable* ElfCache::Cfi(const std::string& path, const MappedFileId& id) {
  const CfiFile* file = LoadCfi(path, id);
  return file != nullptr ? &file->table() : nullptr;
}

const ArmExidxTable* ElfCache::Exidx(const std::string& path, const MappedFileId& id) {
  const CfiFile* file = LoadCfi(path, id);
  return file != nullptr ? file->exidx() : nullptr;
}

}  // namespace droidheap

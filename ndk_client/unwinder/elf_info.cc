#include "unwinder/elf_info.h"

#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

namespace droidheap {
namespace {

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

}  // namespace

uint64_t ElfInfo::LoadBiasAt(uint64_t file_offset) const {
  for (const Segment& s : loads) {
    uint64_t aligned = s.align > 1 ? s.offset & ~(s.align - 1) : s.offset;
    if (file_offset >= aligned && file_offset < s.offset + s.file_size) return s.vaddr - s.offset;
  }
  for (const Segment& s : loads) {
    if (s.executable) return s.vaddr - s.offset;
  }
  return 0;
}

ElfInfo ReadElfInfo(const std::string& path) {
  ElfInfo info;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return info;
  Elf64_Ehdr ehdr;
  if (ReadExact(fd, 0, &ehdr, sizeof(ehdr)) && memcmp(ehdr.e_ident, ELFMAG, SELFMAG) == 0 &&
      ehdr.e_ident[EI_CLASS] == ELFCLASS64 && ehdr.e_phentsize == sizeof(Elf64_Phdr) &&
      ehdr.e_phnum > 0 && ehdr.e_phnum < 4096) {
    std::vector<Elf64_Phdr> phdrs(ehdr.e_phnum);
    if (ReadExact(fd, ehdr.e_phoff, phdrs.data(), phdrs.size() * sizeof(Elf64_Phdr))) {
      info.valid = true;
      for (const Elf64_Phdr& p : phdrs) {
        if (p.p_type == PT_LOAD) {
          info.loads.push_back({p.p_offset, p.p_vaddr, p.p_filesz, p.p_align, (p.p_flags & PF_X) != 0});
        } else if (p.p_type == PT_NOTE && info.build_id.empty()) {
          info.build_id = FindBuildId(fd, p.p_offset, p.p_filesz);
        }
      }
    }
  }
  close(fd);
  return info;
}

ElfCache::Entry& ElfCache::Lookup(const std::string& path, uint64_t inode) {
  auto key = std::make_tuple(path, inode);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_.emplace(key, Entry()).first;
    it->second.info = ReadElfInfo(path);
  }
  return it->second;
}

const ElfInfo& ElfCache::Get(const std::string& path, uint64_t inode) {
  return Lookup(path, inode).info;
}

const CfiTable* ElfCache::Cfi(const std::string& path, uint64_t inode) {
  Entry& entry = Lookup(path, inode);
  if (!entry.cfi_loaded) {
    entry.cfi_loaded = true;
    if (entry.info.valid) entry.cfi = CfiFile::Open(path);
  }
  return entry.cfi ? &entry.cfi->table() : nullptr;
}

}  // namespace droidheap

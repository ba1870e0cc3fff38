#include "unwinder/elf_info.h"

#include <elf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/platform.h"
#include "unwinder/registers.h"
#include "unwinder/zip_entry.h"

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

// The bytes of an ELF file inside the mapped file: every read checked to stay inside it.
struct ElfBytes {
  int fd;
  ElfLocation location;

  bool Read(uint64_t offset, void* out, uint64_t size) const {
    return offset <= location.size && size <= location.size - offset &&
           ReadFileAt(fd, location.offset + offset, out, static_cast<size_t>(size));
  }
};

std::string FindBuildId(const ElfBytes& file, uint64_t offset, uint64_t size) {
  constexpr uint64_t kMaxNotes = 64 * 1024;
  if (size > kMaxNotes) return {};
  std::string notes(size, '\0');
  if (!file.Read(offset, &notes[0], size)) return {};
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
void ReadHeaders(const ElfBytes& file, ElfInfo* info) {
  typename Elf::Ehdr ehdr;
  if (!file.Read(0, &ehdr, sizeof(ehdr)) || ehdr.e_phentsize != sizeof(typename Elf::Phdr) ||
      ehdr.e_phnum == 0 || ehdr.e_phnum >= 4096) {
    return;
  }
  std::vector<typename Elf::Phdr> phdrs(ehdr.e_phnum);
  if (!file.Read(ehdr.e_phoff, phdrs.data(), phdrs.size() * sizeof(typename Elf::Phdr))) {
    return;
  }
  info->valid = true;
  info->machine = ehdr.e_machine;
  for (const typename Elf::Phdr& p : phdrs) {
    if (p.p_type == PT_LOAD) {
      info->loads.push_back(
          {p.p_offset, p.p_vaddr, p.p_filesz, p.p_align, (p.p_flags & PF_X) != 0});
    } else if (p.p_type == PT_NOTE && info->build_id.empty()) {
      info->build_id = FindBuildId(file, p.p_offset, p.p_filesz);
    }
  }
}

bool HasKnownElfAt(int fd, uint64_t offset) {
  // e_ident and e_machine lie at the same offsets in both classes.
  Elf32_Ehdr start;
  return ReadFileAt(fd, offset, &start, sizeof(start)) &&
         IsKnownElf(start.e_ident, start.e_machine);
}

// Where the ELF file that a mapping at `mapping_offset` maps lies: the whole file when it is one,
// else an APK's stored entry holding that offset.
bool LocateElf(int fd, uint64_t file_size, uint64_t mapping_offset, ElfInfo* info) {
  if (HasKnownElfAt(fd, 0)) {
    info->location = {0, file_size, ""};
    return true;
  }
  ZipEntry entry;
  if (!FindStoredEntry(fd, file_size, mapping_offset, &entry, &info->problem)) return false;
  if (!HasKnownElfAt(fd, entry.data_offset)) {
    info->problem = "a zip entry that holds no ELF file of a known ABI";
    return false;
  }
  info->location = {entry.data_offset, entry.size, entry.name};
  return true;
}

}  // namespace

bool ElfInfo::HasCodeIn(uint64_t elf_offset, uint64_t size) const {
  for (const Segment& s : loads) {
    if (s.executable && s.offset < elf_offset + size && s.offset + s.file_size > elf_offset) {
      return true;
    }
  }
  return false;
}

uint64_t ElfInfo::LoadBiasAt(uint64_t elf_offset, bool executable) const {
  // lld starts each segment on a new page in memory but not in the file: the read-only segment
  // and the code after it share the file's first page, and both mappings say offset 0. The
  // mapping's permissions tell which of the two it is.
  const Segment* containing = nullptr;
  for (const Segment& s : loads) {
    uint64_t aligned = s.align > 1 ? s.offset & ~(s.align - 1) : s.offset;
    if (elf_offset < aligned || elf_offset >= s.offset + s.file_size) continue;
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

ElfInfo ReadElfInfo(const std::string& path, const MappedFileId& id, uint64_t mapping_offset) {
  ElfInfo info;
  uint64_t file_size = 0;
  int fd = OpenMappedFile(path, id, &file_size);
  if (fd < 0) return info;
  if (LocateElf(fd, file_size, mapping_offset, &info)) {
    const ElfBytes file{fd, info.location};
    Elf32_Ehdr start;
    file.Read(0, &start, sizeof(start));
    if (start.e_ident[EI_CLASS] == ELFCLASS64) {
      ReadHeaders<Elf64>(file, &info);
    } else {
      ReadHeaders<Elf32>(file, &info);
    }
  }
  close(fd);
  return info;
}

ElfCache::Entry& ElfCache::Lookup(const std::string& path, const MappedFileId& id,
                                  uint64_t mapping_offset) {
  Key mapping_key = std::make_tuple(path, id, mapping_offset);
  auto known = by_mapping_.find(mapping_key);
  if (known != by_mapping_.end()) return *known->second;
  ElfInfo info = ReadElfInfo(path, id, mapping_offset);
  // An ELF file once per location, whichever of its mappings came first; what is no ELF file
  // once per mapping.
  const uint64_t offset = info.valid ? info.location.offset : mapping_offset;
  if (!info.problem.empty()) {
    char where[32];
    snprintf(where, sizeof(where), "%#llx", static_cast<unsigned long long>(mapping_offset));
    problems_.push_back(path + " at offset " + where + ": " + info.problem +
                        ", which no linker maps: its frames are named for the file");
  }
  auto inserted = entries_.emplace(std::make_tuple(path, id, offset), Entry());
  if (inserted.second) inserted.first->second.info = std::move(info);
  Entry* entry = &inserted.first->second;
  by_mapping_.emplace(std::move(mapping_key), entry);
  return *entry;
}

const ElfInfo& ElfCache::Get(const std::string& path, const MappedFileId& id,
                             uint64_t mapping_offset) {
  return Lookup(path, id, mapping_offset).info;
}

const CfiFile* ElfCache::LoadCfi(const std::string& path, const MappedFileId& id,
                                 uint64_t mapping_offset) {
  Entry& entry = Lookup(path, id, mapping_offset);
  if (!entry.cfi_loaded) {
    entry.cfi_loaded = true;
    if (entry.info.valid) entry.cfi = CfiFile::Open(path, id, entry.info.location);
  }
  return entry.cfi.get();
}

const CfiTable* ElfCache::Cfi(const std::string& path, const MappedFileId& id,
                              uint64_t mapping_offset) {
  const CfiFile* file = LoadCfi(path, id, mapping_offset);
  return file != nullptr ? &file->table() : nullptr;
}

const ArmExidxTable* ElfCache::Exidx(const std::string& path, const MappedFileId& id,
                                     uint64_t mapping_offset) {
  const CfiFile* file = LoadCfi(path, id, mapping_offset);
  return file != nullptr ? file->exidx() : nullptr;
}

std::vector<std::string> ElfCache::TakeProblems() {
  std::vector<std::string> taken;
  taken.swap(problems_);
  return taken;
}

}  // namespace droidheap

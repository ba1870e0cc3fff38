#include "unwinder/elf_info.h"

#include <elf.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

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

// The headers of the ELF file at `location` of the file read through `fd`.
ElfInfo ReadHeadersAt(int fd, const ElfLocation& location) {
  ElfInfo info;
  info.location = location;
  const ElfBytes file{fd, location};
  Elf32_Ehdr start;
  if (!file.Read(0, &start, sizeof(start))) return info;
  if (start.e_ident[EI_CLASS] == ELFCLASS64) {
    ReadHeaders<Elf64>(file, &info);
  } else {
    ReadHeaders<Elf32>(file, &info);
  }
  return info;
}

// What a File's map nodes and an Elf's strings hold, roughly: enough to bound a process that maps
// one file at a million offsets.
constexpr uint64_t kNodeBytes = 64;

uint64_t BytesOf(const ElfInfo& info) {
  return kNodeBytes + sizeof(ElfInfo) + info.build_id.capacity() + info.location.entry.capacity() + info.loads.capacity() * sizeof(ElfInfo::Segment);
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

ElfCache::Elf& ElfCache::Lookup(const std::string& path, const MappedFileId& id,
                                uint64_t mapping_offset) {
  Key key(path, id);
  auto found = files_.find(key);
  if (found == files_.end()) {
    found = files_.emplace(key, File()).first;
    Count(&found->second, static_cast<int64_t>(sizeof(File) + kNodeBytes + path.capacity()));
  }
  File* file = &found->second;
  file->last_used = ++uses_;
  auto known = file->by_mapping.find(mapping_offset);
  if (known != file->by_mapping.end()) return *known->second;
  Elf& elf = Locate(found->first, file, mapping_offset);
  if (&elf == &put_off_) return elf;
  file->by_mapping.emplace(mapping_offset, &elf);
  Count(file, kNodeBytes);
  return elf;
}

ElfCache::Elf& ElfCache::Locate(const Key& key, File* file, uint64_t mapping_offset) {
  // A file that is one ELF file has it at offset 0 (the least key) for every mapping.
  if (file->kind == Kind::kElf) return file->elves.begin()->second;
  ElfInfo info;
  uint64_t file_size = 0;
  const int fd = OpenMappedFile(key.first, key.second, &file_size);
  if (fd >= 0) {
    if (file->kind == Kind::kUnknown) Classify(key, file, fd, file_size, mapping_offset);
    if (file->kind == Kind::kUnknown) {
      close(fd);
      return put_off_;
    }
    ZipEntry entry;
    std::string why;
    if (file->kind == Kind::kElf) {
      info = ReadHeadersAt(fd, {0, file_size, ""});
    } else if (file->kind != Kind::kZip) {
      // Neither: no ELF file.
    } else if (!file->zip.FindStoredEntry(fd, file_size, mapping_offset, &entry, &why)) {
      Tell(key, file, mapping_offset, why);
    } else if (!HasKnownElfAt(fd, entry.data_offset)) {
      Tell(key, file, mapping_offset, "a zip entry that holds no ELF file of a known ABI");
    } else {
      auto known = file->elves.find(entry.data_offset);
      if (known != file->elves.end() && known->second.info.valid) {
        close(fd);
        return known->second;
      }
      info = ReadHeadersAt(fd, {entry.data_offset, entry.size, std::move(entry.name)});
    }
    close(fd);
  }
  // An ELF file once per location; what is no ELF file once per mapping.
  const uint64_t offset = info.valid ? info.location.offset : mapping_offset;
  Elf& elf = file->elves[offset];
  Count(file, -static_cast<int64_t>(BytesOf(elf.info)));
  elf.info = std::move(info);
  Count(file, static_cast<int64_t>(BytesOf(elf.info)));
  if (file->kind == Kind::kElf && !elf.info.valid) file->kind = Kind::kNeither;
  return elf;
}

void ElfCache::Classify(const Key& key, File* file, int fd, uint64_t file_size,
                        uint64_t mapping_offset) {
  if (HasKnownElfAt(fd, 0)) {
    file->kind = Kind::kElf;
    return;
  }
  ReadAllowance allowance = FileAllowance();
  std::string why;
  const bool is_zip = file->zip.Read(fd, file_size, &allowance, &why);
  if (Settle(allowance)) return;  // read by a later unwind, one allowed to
  file->kind = is_zip ? Kind::kZip : Kind::kNeither;
  Count(file, static_cast<int64_t>(file->zip.memory_bytes()));
  if (!why.empty()) Tell(key, file, mapping_offset, why);
}

void ElfCache::Tell(const Key& key, File* file, uint64_t mapping_offset,
                    const std::string& problem) {
  if (file->problem_told) return;
  file->problem_told = true;
  if (problems_told_ > kMaxProblems) return;
  if (++problems_told_ > kMaxProblems) {
    problems_.push_back("more mapped files that no linker maps as they are mapped: not told");
    return;
  }
  char where[32];
  snprintf(where, sizeof(where), "%#llx", static_cast<unsigned long long>(mapping_offset));
  problems_.push_back(key.first + " at offset " + where + ": " + problem +
                      ", which no linker maps: its frames are named for the file");
}

ReadAllowance ElfCache::FileAllowance() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t now_us =
      static_cast<uint64_t>(now.tv_sec) * 1000000u + static_cast<uint64_t>(now.tv_nsec) / 1000u;
  // An unwind's first file is read whatever it takes (up to half the cache): each unwind that is
  // put off and tried again reads one file more at least.
  const uint64_t file_cap = max_bytes_ / 2;
  granted_ = !loaded_ ? file_cap
             : now_us >= load_deadline_us_ ? 0 : std::min(unwind_reads_left_, file_cap);
  return ReadAllowance(granted_, max_bytes_ / 2);
}

bool ElfCache::Settle(const ReadAllowance& allowance) {
  if (allowance.remaining() < granted_) {
    unwind_reads_left_ -= std::min(unwind_reads_left_, granted_ - allowance.remaining());
    loaded_ = true;
  }
  // Refused for what this unwind had left, not for what any file may take: tried again later.
  if (allowance.put_off()) deferred_ = true;
  return allowance.put_off();
}

void ElfCache::Count(File* file, int64_t bytes) {
  file->bytes += static_cast<uint64_t>(bytes);
  bytes_ += static_cast<uint64_t>(bytes);
}

const ElfInfo& ElfCache::Get(const std::string& path, const MappedFileId& id,
                             uint64_t mapping_offset) {
  return Lookup(path, id, mapping_offset).info;
}

const CfiFile* ElfCache::LoadCfi(const std::string& path, const MappedFileId& id,
                                 uint64_t mapping_offset) {
  Elf& elf = Lookup(path, id, mapping_offset);
  if (!elf.cfi_loaded && elf.info.valid) {
    ReadAllowance allowance = FileAllowance();
    std::unique_ptr<CfiFile> cfi = CfiFile::Open(path, id, elf.info.location, &allowance);
    if (!Settle(allowance)) {
      elf.cfi_loaded = true;
      elf.cfi = std::move(cfi);
      if (elf.cfi) Count(&files_.find(Key(path, id))->second, elf.cfi->memory_bytes());
    }
  }
  return elf.cfi.get();
}

void ElfCache::BeginUnwind() {
  unwind_reads_left_ = unwind_reads_;
  loaded_ = false;
  if (deferred_) ++generation_;  // what was put off is tried again
  deferred_ = false;
  if (bytes_ <= max_bytes_) return;
  // Down to three quarters, so that a cache at its bound does not drop a file every unwind.
  std::vector<std::pair<uint64_t, std::map<Key, File>::iterator>> by_use;
  for (auto it = files_.begin(); it != files_.end(); ++it) by_use.emplace_back(it->second.last_used, it);
  std::sort(by_use.begin(), by_use.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [used, it] : by_use) {
    if (bytes_ <= max_bytes_ / 4 * 3) break;
    bytes_ -= it->second.bytes;
    files_.erase(it);
  }
  ++generation_;
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

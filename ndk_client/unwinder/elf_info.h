// What the daemon needs to know about a mapped ELF file: its build id and the load bias of each
// loadable segment, so that a pc becomes an ELF virtual address (rel_pc) the host can symbolize,
// and, for unwinding, its call-frame information and EHABI table. The ELF file is the mapped file,
// or a library an APK stores (zip_entry.h), which the linker maps from inside the APK.
#pragma once

#include <stdint.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "unwinder/cfi_file.h"
#include "unwinder/file_reads.h"
#include "unwinder/mapped_file.h"
#include "unwinder/zip_entry.h"

namespace droidheap {

struct ElfInfo {
  struct Segment {
    uint64_t offset;
    uint64_t vaddr;
    uint64_t file_size;
    uint64_t align;
    bool executable;
  };
  bool valid = false;
  ElfLocation location;
  // Not known yet: what locates the ELF file (an APK's directory) was more than the unwind that
  // asked could read. Asked again, a later unwind reads it.
  bool put_off = false;
  uint16_t machine = 0;  // e_machine
  std::string build_id;  // raw bytes
  std::vector<Segment> loads;

  // p_vaddr - p_offset of the PT_LOAD that a mapping at `elf_offset` (executable or not) maps.
  // Offsets here are the ELF file's own: a mapping's file offset less location.offset.
  uint64_t LoadBiasAt(uint64_t elf_offset, bool executable) const;
  // Whether an executable PT_LOAD lies in the ELF file's bytes [elf_offset, elf_offset + size).
  bool HasCodeIn(uint64_t elf_offset, uint64_t size) const;
};

// Whether e_ident and e_machine are those of a little-endian ELF file of one of the ABIs in
// registers.h, of either class (a 64-bit daemon reads a 32-bit app's files).
bool IsKnownElf(const unsigned char* ident, uint16_t machine);

// The ELF files of the files a worker's processes map: where each lies (the whole file, or an
// APK's stored entry holding a mapping's offset: zip_entry.h), its headers (ElfInfo, read once per
// ELF file) and its unwind tables (CfiFile, read on first use). Keyed by path and file identity,
// so a replaced file is read again; a file that is not the one mapped is never read.
//
// The files are the processes' and may be made to cost anything, so what the cache does is
// bounded: what one unwind may read (kUnwindReadBytes, and after its first file only until the load
// deadline; a file's tables that do not fit are put off to a later unwind, and that unwind says so:
// deferred()), what one file's tables may hold (half
// the cache), and what the cache holds (max_bytes: past it, BeginUnwind drops the files least
// recently used). An APK's directory is read once however many offsets it is mapped at, and each
// file's problems are told once, the cache's at most kMaxProblems times.
// Owned by one unwinding worker (not thread-safe).
class ElfCache {
 public:
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{256} << 20;
  // An honest process's first stack reads the tables of a few dozen libraries, a few MiB each.
  static constexpr uint64_t kUnwindReadBytes = uint64_t{64} << 20;
  static constexpr size_t kMaxProblems = 16;

  // `unwind_reads`: what one unwind may read (tests make it small).
  explicit ElfCache(uint64_t max_bytes = kDefaultMaxBytes,
                    uint64_t unwind_reads = kUnwindReadBytes)
      : max_bytes_(max_bytes), unwind_reads_(unwind_reads), unwind_reads_left_(unwind_reads) {
    put_off_.info.put_off = true;
  }

  // The ELF file a mapping at `mapping_offset` of the file `id` at `path` maps; invalid when that
  // is not the file there or it holds no ELF file of a known ABI (IsKnownElf) there. Valid until
  // the next BeginUnwind.
  const ElfInfo& Get(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
  // Its unwind tables, read on first use; nullptr when they cannot be read. Valid while
  // generation() stays the same.
  const CfiTable* Cfi(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
  // Its EHABI table (32-bit ARM files), read with the CFI; nullptr when it has none.
  const ArmExidxTable* Exidx(const std::string& path, const MappedFileId& id,
                             uint64_t mapping_offset);

  // Before each unwind: drops what the cache holds past max_bytes, least recently used first, and
  // gives the unwind its reads.
  void BeginUnwind();
  // From now on, an unwind reads no file's tables after its first once CLOCK_MONOTONIC passes
  // `deadline_us`: the rest are put off (the worker's share of its time for a client).
  void SetLoadDeadline(uint64_t deadline_us) { load_deadline_us_ = deadline_us; }
  // Changes when BeginUnwind dropped tables, or the last unwind had some put off (to be tried
  // again): every table pointer taken before then is to be taken again.
  uint64_t generation() const { return generation_; }
  // Whether this unwind went without a file's tables that it was not allowed to read.
  bool deferred() const { return deferred_; }
  uint64_t memory_bytes() const { return bytes_; }

  // What was found wrong in mapped files since the last call (an APK's entry that no linker
  // maps), one line each, for the daemon's log.
  std::vector<std::string> TakeProblems();

 private:
  struct Elf {
    ElfInfo info;
    bool cfi_loaded = false;
    std::unique_ptr<CfiFile> cfi;
  };
  enum class Kind { kUnknown, kElf, kZip, kNeither };
  struct File {
    Kind kind = Kind::kUnknown;
    ZipDirectory zip;
    bool problem_told = false;
    std::map<uint64_t, Elf> elves;        // by the ELF file's offset; invalid ones by mapping's
    std::map<uint64_t, Elf*> by_mapping;  // into elves (whose nodes never move)
    uint64_t bytes = 0;                   // what it holds, counted into bytes_
    uint64_t last_used = 0;
  };
  using Key = std::pair<std::string, MappedFileId>;

  Elf& Lookup(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
  // Finds where the ELF file of a mapping lies and reads its headers.
  Elf& Locate(const Key& key, File* file, uint64_t mapping_offset);
  // Tells an ELF file from a zip (whose directory it reads) and from neither.
  void Classify(const Key& key, File* file, int fd, uint64_t file_size, uint64_t mapping_offset);
  const CfiFile* LoadCfi(const std::string& path, const MappedFileId& id,
                         uint64_t mapping_offset);
  // A read allowance for one file's tables: what remains of the unwind's, at most the file's cap;
  // Settle charges the unwind and says whether the file is to be tried again later.
  ReadAllowance FileAllowance();
  bool Settle(const ReadAllowance& allowance);
  void Count(File* file, int64_t bytes);
  void Tell(const Key& key, File* file, uint64_t mapping_offset, const std::string& problem);

  const uint64_t max_bytes_;
  std::map<Key, File> files_;
  Elf put_off_;  // what Lookup gives while a file's kind is put off
  uint64_t bytes_ = 0;
  uint64_t uses_ = 0;
  uint64_t generation_ = 1;
  const uint64_t unwind_reads_;
  uint64_t unwind_reads_left_;
  uint64_t load_deadline_us_ = UINT64_MAX;
  uint64_t granted_ = 0;  // by the last FileAllowance
  bool loaded_ = false;  // this unwind read a file's tables or directory
  bool deferred_ = false;
  size_t problems_told_ = 0;
  std::vector<std::string> problems_;
};

}  // namespace droidheap

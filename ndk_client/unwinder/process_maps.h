// A profiled process's memory map, parsed from the /proc/pid/maps fd the client passed at the
// handshake. Owned by the unwinding worker that owns the client; re-parsed when a pc falls outside
// every known mapping (a library was loaded since).
#pragma once

#include <stdint.h>

#include <array>
#include <string>
#include <vector>

#include "unwinder/elf_info.h"
#include "unwinder/mapped_file.h"

namespace droidheap {

struct MapEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  MappedFileId file;  // the device and inode of the mapped file
  bool executable = false;
  bool readable = false;
  bool writable = false;
  bool shared = false;  // MAP_SHARED
  // False for a mapping known only from the host's view under qemu-user (SetHostViewPid), whose
  // permissions are qemu's, not the guest's: the ELF file then says whether it holds code.
  bool permissions_known = true;
  std::string path;
  // Filled on first use from the ELF file (see Find).
  bool resolved = false;
  std::string build_id;
  uint64_t load_bias = 0;
  ElfLocation elf;  // where in the mapped file the ELF file lies (an APK's entry, or all of it)
  // Unwind tables, of file mappings where the file has code: owned by the ElfCache, taken from it
  // again whenever its generation changes (it may have dropped them).
  bool has_tables = false;
  uint64_t tables_generation = 0;
  const CfiTable* cfi = nullptr;
  const ArmExidxTable* exidx = nullptr;  // ... of 32-bit ARM files with one

  // The ELF virtual address of `pc` in this mapping: what the host symbolizes.
  uint64_t RelPc(uint64_t pc) const { return pc - start + (offset - elf.offset) + load_bias; }
};

class ProcessMaps {
 public:
  // Parses the text of /proc/pid/maps. Malformed lines are skipped.
  void Parse(const std::string& text);
  // Reads the whole maps file through `fd` (from offset 0) and parses it. False, keeping the
  // known maps, on a read error or when the process has exited (an empty file).
  bool Reload(int fd);
  // Under qemu-user (7.2 at least) a guest's own maps leave out each mapping the kernel merged
  // with its neighbour (a library's read-only segment and its code, which qemu maps without
  // PROT_EXEC): from now on each Reload also reads /proc/`pid`/maps, the host's view at the same
  // addresses, and adds the file mappings it has that the guest's lacks.
  void SetHostViewPid(int pid) { host_view_pid_ = pid; }
  // Adds the file mappings of `host_text` (maps lines) that overlap no known entry.
  void AddMissing(const std::string& host_text);

  // The mapping containing pc, with its ELF facts resolved; nullptr when none.
  const MapEntry* Find(uint64_t pc, ElfCache* elf_cache);
  const std::vector<MapEntry>& entries() const { return entries_; }
  // Changes whenever the entries are replaced: pointers to them from an older generation dangle.
  // Unique among all ProcessMaps of the process, so that it also tells two of them apart.
  uint64_t generation() const { return generation_; }

 private:
  // Frames come from a few pages of code, again and again: the entry each page was last found in
  // is kept (direct-mapped by page number), so that most lookups skip the binary search over
  // entries_, thousands of them in an app.
  struct PageHit {
    uint64_t page = kNoPage;
    uint32_t index = 0;
  };
  static constexpr uint64_t kNoPage = ~uint64_t{0};
  static constexpr int kPageHitsLog2 = 9;

  static std::vector<MapEntry> ParseLines(const std::string& text);
  // Points the entry at its file's tables as the cache holds them now.
  static void TakeTables(MapEntry* entry, ElfCache* elf_cache);

  std::vector<MapEntry> entries_;  // sorted by start
  int host_view_pid_ = -1;
  uint64_t generation_ = 0;
  std::array<PageHit, size_t{1} << kPageHitsLog2> page_hits_;  // emptied with entries_
};

}  // namespace droidheap

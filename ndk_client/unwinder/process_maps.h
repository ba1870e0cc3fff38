// A profiled process's memory map, parsed from the /proc/pid/maps fd the client passed at the
// handshake. Owned by the unwinding worker that owns the client; re-parsed when a pc falls outside
// every known mapping (a library was loaded since).
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "unwinder/elf_info.h"

namespace droidheap {

struct MapEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  uint64_t inode = 0;
  bool executable = false;
  std::string path;
  // Filled on first use from the ELF file (see Resolve).
  bool resolved = false;
  std::string build_id;
  uint64_t load_bias = 0;
  const CfiTable* cfi = nullptr;  // executable file mappings; owned by the ElfCache
};

class ProcessMaps {
 public:
  // Parses the text of /proc/pid/maps. Malformed lines are skipped.
  void Parse(const std::string& text);
  // Reads the whole maps file through `fd` (from offset 0) and parses it. False, keeping the
  // known maps, on a read error or when the process has exited (an empty file).
  bool Reload(int fd);

  // The mapping containing pc, with its ELF facts resolved; nullptr when none.
  const MapEntry* Find(uint64_t pc, ElfCache* elf_cache);
  const std::vector<MapEntry>& entries() const { return entries_; }
  // Changes whenever the entries are replaced: pointers to them from an older generation dangle.
  uint64_t generation() const { return generation_; }

 private:
  std::vector<MapEntry> entries_;  // sorted by start
  uint64_t generation_ = 0;
};

}  // namespace droidheap

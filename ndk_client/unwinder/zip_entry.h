// Where a library stored in an APK lies. Android's linker maps an app's native library straight
// from its APK (`dlopen("…/base.apk!/lib/arm64-v8a/libfoo.so")`) when the zip stores it
// uncompressed at a page-aligned offset, so the process's maps name the APK at an offset inside
// that entry. The zip's central directory says which entry holds the offset and where its bytes
// lie. The file is the profiled app's (hostile input): every size is checked against the file,
// the directory read is capped and charged to the reader's allowance, and an entry that the
// linker could not have mapped (compressed, not page-aligned, past the end of the file) is refused
// with the reason. A process may map one APK at any number of offsets: its directory is read and
// indexed once (ZipDirectory), and each offset then costs a binary search and two small reads.
// Owned by one thread.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "unwinder/file_reads.h"

namespace droidheap {

struct ZipEntry {
  std::string name;       // as the central directory gives it ("lib/x86_64/libfoo.so")
  uint64_t data_offset = 0;  // where its (stored) bytes begin in the file
  uint64_t size = 0;         // how many there are
};

class ZipDirectory {
 public:
  // Reads and indexes the central directory of the zip read through `fd` (a regular file of
  // `file_size` bytes). False when the file is no zip (`*why` empty), or its directory cannot be
  // used (`*why` says why in a few words; `allowance->exhausted()` when it was not allowed).
  bool Read(int fd, uint64_t file_size, ReadAllowance* allowance, std::string* why);
  // The stored entry whose bytes hold `offset`, its record and local header read again through
  // `fd`. False, with `*why`, when no entry there can have been mapped by the linker.
  bool FindStoredEntry(int fd, uint64_t file_size, uint64_t offset, ZipEntry* entry,
                       std::string* why) const;
  size_t memory_bytes() const { return entries_.capacity() * sizeof(Entry); }

 private:
  struct Entry {
    uint32_t local_header;  // its local header's offset in the file
    uint32_t record;        // its record's offset in the directory
  };
  uint64_t directory_offset_ = 0;
  uint64_t directory_size_ = 0;
  std::vector<Entry> entries_;  // sorted by local_header, then by record
};

}  // namespace droidheap

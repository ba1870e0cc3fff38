// Where a library stored in an APK lies. Android's linker maps an app's native library straight
// from its APK (`dlopen("…/base.apk!/lib/arm64-v8a/libfoo.so")`) when the zip stores it
// uncompressed at a page-aligned offset, so the process's maps name the APK at an offset inside
// that entry. The zip's central directory says which entry holds the offset and where its bytes
// lie. The file is the profiled app's (hostile input): every size is checked against the file,
// the directory read is capped, and an entry that the linker could not have mapped (compressed,
// not page-aligned, past the end of the file) is refused with the reason. Stateless; any thread.
#pragma once

#include <stdint.h>

#include <string>

namespace droidheap {

struct ZipEntry {
  std::string name;       // as the central directory gives it ("lib/x86_64/libfoo.so")
  uint64_t data_offset = 0;  // where its (stored) bytes begin in the file
  uint64_t size = 0;         // how many there are
};

// The stored entry of the zip read through `fd` (a regular file of `file_size` bytes) whose bytes
// hold `offset`. False when the file is no zip (`*why` empty), or when no entry there can have
// been mapped by the linker (`*why` says why in a few words). `why` may be null.
bool FindStoredEntry(int fd, uint64_t file_size, uint64_t offset, ZipEntry* entry,
                     std::string* why);

}  // namespace droidheap

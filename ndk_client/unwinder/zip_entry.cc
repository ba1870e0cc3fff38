#include "unwinder/zip_entry.h"

#include <string.h>

#include <vector>

#include "unwinder/mapped_file.h"

namespace droidheap {
namespace {

// The zip format's records (APPNOTE.TXT, 4.3): little-endian, packed; read field by field.
constexpr uint32_t kEndOfDirectorySignature = 0x06054b50;
constexpr uint32_t kDirectoryEntrySignature = 0x02014b50;
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kDirectoryEntrySize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kMaxCommentSize = 0xffff;
constexpr uint16_t kStored = 0;
// An APK of 100k entries has a directory of about 10 MiB; past this, the file is not read.
constexpr uint64_t kMaxDirectorySize = 64ull << 20;
// The linker maps only entries at a multiple of the page size, 4 KiB at least.
constexpr uint64_t kMinPageSize = 4096;

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t U32(const uint8_t* p) { return U16(p) | (static_cast<uint32_t>(U16(p + 2)) << 16); }

bool Fail(std::string* why, const char* reason) {
  if (why != nullptr) *why = reason;
  return false;
}

// A file that is no zip at all is nothing wrong: most mapped files are not.
bool NotAZip(std::string* why) { return Fail(why, ""); }

// The central directory's offset and size, from the end-of-directory record (found backwards
// through the trailing comment).
bool FindDirectory(int fd, uint64_t file_size, uint64_t* offset, uint64_t* size,
                   std::string* why) {
  if (file_size < kEndOfDirectorySize) return NotAZip(why);
  const uint64_t tail_size = file_size < kEndOfDirectorySize + kMaxCommentSize
                                 ? file_size
                                 : kEndOfDirectorySize + kMaxCommentSize;
  std::vector<uint8_t> tail(static_cast<size_t>(tail_size));
  if (!ReadFileAt(fd, file_size - tail_size, tail.data(), tail.size())) return NotAZip(why);
  for (size_t at = tail.size() - kEndOfDirectorySize;; --at) {
    const uint8_t* record = tail.data() + at;
    if (U32(record) == kEndOfDirectorySignature &&
        at + kEndOfDirectorySize + U16(record + 20) == tail.size()) {
      *size = U32(record + 12);
      *offset = U32(record + 16);
      if (*offset == 0xffffffffu || *size == 0xffffffffu) return Fail(why, "a zip64 file");
      if (*offset > file_size || *size > file_size - *offset) {
        return Fail(why, "a truncated zip file");
      }
      if (*size > kMaxDirectorySize) return Fail(why, "a zip directory too large to read");
      return true;
    }
    if (at == 0) return NotAZip(why);
  }
}

}  // namespace

bool FindStoredEntry(int fd, uint64_t file_size, uint64_t offset, ZipEntry* entry,
                     std::string* why) {
  uint64_t directory_offset = 0, directory_size = 0;
  if (!FindDirectory(fd, file_size, &directory_offset, &directory_size, why)) return false;
  std::vector<uint8_t> directory(static_cast<size_t>(directory_size));
  if (!ReadFileAt(fd, directory_offset, directory.data(), directory.size())) {
    return Fail(why, "unreadable");
  }
  // The entry whose local header is the last one at or before `offset`: entries do not overlap,
  // so only it can hold `offset`.
  const uint8_t* best = nullptr;
  uint64_t best_header = 0;
  for (size_t at = 0; at + kDirectoryEntrySize <= directory.size();) {
    const uint8_t* record = directory.data() + at;
    if (U32(record) != kDirectoryEntrySignature) break;
    const uint64_t record_size =
        kDirectoryEntrySize + U16(record + 28) + U16(record + 30) + U16(record + 32);
    if (record_size > directory.size() - at) break;
    const uint64_t header = U32(record + 42);
    if (header <= offset && (best == nullptr || header >= best_header)) {
      best = record;
      best_header = header;
    }
    at += static_cast<size_t>(record_size);
  }
  if (best == nullptr) return Fail(why, "no zip entry holds the mapping's offset");

  uint8_t local[kLocalHeaderSize];
  if (best_header > file_size || kLocalHeaderSize > file_size - best_header ||
      !ReadFileAt(fd, best_header, local, sizeof(local)) ||
      U32(local) != kLocalHeaderSignature) {
    return Fail(why, "a zip entry without its local header");
  }
  const uint64_t data_offset = best_header + kLocalHeaderSize + U16(local + 26) + U16(local + 28);
  const uint64_t size = U32(best + 20);
  if (offset < data_offset || offset - data_offset >= size) {
    return Fail(why, "no zip entry holds the mapping's offset");
  }
  if (U16(best + 10) != kStored) return Fail(why, "a compressed zip entry");
  if (U32(best + 24) != size) return Fail(why, "a zip entry whose sizes disagree");
  if (data_offset % kMinPageSize != 0) return Fail(why, "a zip entry not page-aligned");
  if (data_offset > file_size || size > file_size - data_offset) {
    return Fail(why, "a zip entry past the end of the file");
  }
  entry->name.assign(reinterpret_cast<const char*>(best + kDirectoryEntrySize), U16(best + 28));
  // The name goes into the trace's mapping path and the daemon's log lines.
  if (entry->name.empty()) return Fail(why, "a zip entry without a name");
  for (char c : entry->name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Fail(why, "a zip entry whose name holds control characters");
    }
  }
  entry->data_offset = data_offset;
  entry->size = size;
  return true;
}

}  // namespace droidheap

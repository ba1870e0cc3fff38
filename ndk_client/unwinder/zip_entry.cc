#include "unwinder/zip_entry.h"

#include <string.h>

#include <algorithm>
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

bool ZipDirectory::Read(int fd, uint64_t file_size, ReadAllowance* allowance, std::string* why) {
  entries_.clear();
  if (!FindDirectory(fd, file_size, &directory_offset_, &directory_size_, why)) return false;
  std::vector<uint8_t> directory;
  const ElfBytes file{fd, {0, file_size, ""}};
  if (!file.ReadTable(directory_offset_, directory_size_, allowance, &directory)) {
    return Fail(why, allowance->exhausted() ? "a zip directory too large to read"
                                            : "an unreadable zip directory");
  }
  for (size_t at = 0; at + kDirectoryEntrySize <= directory.size();) {
    const uint8_t* record = directory.data() + at;
    if (U32(record) != kDirectoryEntrySignature) break;
    const uint64_t record_size =
        kDirectoryEntrySize + U16(record + 28) + U16(record + 30) + U16(record + 32);
    if (record_size > directory.size() - at) break;
    entries_.push_back({U32(record + 42), static_cast<uint32_t>(at)});
    at += static_cast<size_t>(record_size);
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.local_header != b.local_header ? a.local_header < b.local_header
                                            : a.record < b.record;
  });
  entries_.shrink_to_fit();
  return true;
}

bool ZipDirectory::FindStoredEntry(int fd, uint64_t file_size, uint64_t offset, ZipEntry* entry,
                                   std::string* why) const {
  // The entry whose local header is the last one at or before `offset` (of two at one header,
  // the later record): entries do not overlap, so only it can hold `offset`.
  auto after = std::upper_bound(entries_.begin(), entries_.end(), offset,
                                [](uint64_t value, const Entry& e) {
                                  return value < e.local_header;
                                });
  if (after == entries_.begin()) return Fail(why, "no zip entry holds the mapping's offset");
  const Entry& found = *(after - 1);
  // The file may have changed since its directory was read: what is read now is checked afresh.
  uint8_t record[kDirectoryEntrySize];
  const uint64_t record_offset = directory_offset_ + found.record;
  if (!ReadFileAt(fd, record_offset, record, sizeof(record)) ||
      U32(record) != kDirectoryEntrySignature || U32(record + 42) != found.local_header) {
    return Fail(why, "a zip directory changed while it was read");
  }
  const uint64_t best_header = found.local_header;
  uint8_t local[kLocalHeaderSize];
  if (best_header > file_size || kLocalHeaderSize > file_size - best_header ||
      !ReadFileAt(fd, best_header, local, sizeof(local)) ||
      U32(local) != kLocalHeaderSignature) {
    return Fail(why, "a zip entry without its local header");
  }
  const uint64_t data_offset = best_header + kLocalHeaderSize + U16(local + 26) + U16(local + 28);
  const uint64_t size = U32(record + 20);
  if (offset < data_offset || offset - data_offset >= size) {
    return Fail(why, "no zip entry holds the mapping's offset");
  }
  if (U16(record + 10) != kStored) return Fail(why, "a compressed zip entry");
  if (U32(record + 24) != size) return Fail(why, "a zip entry whose sizes disagree");
  if (data_offset % kMinPageSize != 0) return Fail(why, "a zip entry not page-aligned");
  if (data_offset > file_size || size > file_size - data_offset) {
    return Fail(why, "a zip entry past the end of the file");
  }
  const uint16_t name_size = U16(record + 28);
  entry->name.assign(name_size, '\0');
  if (name_size == 0) return Fail(why, "a zip entry without a name");
  if (!ReadFileAt(fd, record_offset + kDirectoryEntrySize, &entry->name[0], name_size)) {
    return Fail(why, "a zip directory changed while it was read");
  }
  // The name goes into the trace's mapping path and the daemon's log lines.
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

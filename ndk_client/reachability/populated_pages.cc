#include "reachability/populated_pages.h"

#include <errno.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

namespace droidheap {
namespace {

// PAGEMAP_SCAN's interface (linux/fs.h from Linux 6.7; older headers lack it).
struct PageRegion {
  uint64_t start;
  uint64_t end;
  uint64_t categories;
};
struct PagemapScanArg {
  uint64_t size;
  uint64_t flags;
  uint64_t start;
  uint64_t end;
  uint64_t walk_end;
  uint64_t vec;
  uint64_t vec_len;
  uint64_t max_pages;
  uint64_t category_inverted;
  uint64_t category_mask;
  uint64_t category_anyof_mask;
  uint64_t return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PagemapScanArg);
constexpr uint64_t kPageIsPresent = 1u << 3;
constexpr uint64_t kPageIsSwapped = 1u << 4;
// pagemap entries' bits.
constexpr uint64_t kEntrySwapped = uint64_t{1} << 62;
constexpr uint64_t kEntryPresent = uint64_t{1} << 63;

void Add(uint64_t start, uint64_t end, std::vector<std::pair<uint64_t, uint64_t>>* out) {
  if (!out->empty() && out->back().second == start) {
    out->back().second = end;
  } else {
    out->emplace_back(start, end);
  }
}

}  // namespace

PopulatedPages::PopulatedPages(int pagemap_fd)
    : fd_(pagemap_fd), page_size_(static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) {}

bool PopulatedPages::Append(uint64_t start, uint64_t end,
                            std::vector<std::pair<uint64_t, uint64_t>>* out) {
  if (fd_ < 0) return false;
  start &= ~(page_size_ - 1);
  end = (end + page_size_ - 1) & ~(page_size_ - 1);
  if (start >= end) return true;
  const size_t before = out->size();
  if (scan_works_ && AppendScanned(start, end, out)) return true;
  out->resize(before);
  if (end - start > kMaxReadRange) return false;
  if (AppendRead(start, end, out)) return true;
  out->resize(before);
  return false;
}

bool PopulatedPages::AppendScanned(uint64_t start, uint64_t end,
                                   std::vector<std::pair<uint64_t, uint64_t>>* out) {
  PageRegion regions[256];
  for (uint64_t from = start; from < end;) {
    PagemapScanArg arg{};
    arg.size = sizeof(arg);
    arg.start = from;
    arg.end = end;
    arg.vec = reinterpret_cast<uintptr_t>(regions);
    arg.vec_len = sizeof(regions) / sizeof(regions[0]);
    arg.category_anyof_mask = kPageIsPresent | kPageIsSwapped;
    arg.return_mask = kPageIsPresent | kPageIsSwapped;
    const int n = ioctl(fd_, kPagemapScan, &arg);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOTTY || errno == EINVAL || errno == ENOSYS) scan_works_ = false;
      return false;
    }
    for (int i = 0; i < n; ++i) Add(regions[i].start, regions[i].end, out);
    if (arg.walk_end <= from) return false;  // no progress: do not loop
    from = arg.walk_end;
  }
  return true;
}

bool PopulatedPages::AppendRead(uint64_t start, uint64_t end,
                                std::vector<std::pair<uint64_t, uint64_t>>* out) {
  uint64_t entries[8192];
  for (uint64_t page = start / page_size_; page < end / page_size_;) {
    const uint64_t count = std::min<uint64_t>(sizeof(entries) / sizeof(entries[0]),
                                              end / page_size_ - page);
    const ssize_t n = pread(fd_, entries, count * sizeof(uint64_t),
                            static_cast<off_t>(page * sizeof(uint64_t)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || n % sizeof(uint64_t) != 0) return false;
    const uint64_t read = static_cast<uint64_t>(n) / sizeof(uint64_t);
    for (uint64_t i = 0; i < read; ++i) {
      if (entries[i] & (kEntryPresent | kEntrySwapped)) {
        Add((page + i) * page_size_, (page + i + 1) * page_size_, out);
      }
    }
    page += read;
  }
  return true;
}

}  // namespace droidheap

// Which pages of a process's memory hold anything: those present or swapped out, from its
// /proc/PID/pagemap. A sweep reads only those: a page never touched reads as zeros, and reading it
// through /proc/PID/mem would map it (a sanitizer's shadow, a runtime's reservation of terabytes
// made writable, would cost the copy a page table per 2 MiB read, and the daemon hours).
//
// Uses the PAGEMAP_SCAN ioctl (Linux 6.7), which skips what is not mapped a page table at a time;
// older kernels are read eight bytes a page, up to a bound per range. Not thread-safe.
#pragma once

#include <stdint.h>

#include <utility>
#include <vector>

namespace droidheap {

class PopulatedPages {
 public:
  // A pagemap file of the process (not owned); the page size is the daemon's, the kernel's.
  explicit PopulatedPages(int pagemap_fd);

  // Appends the populated parts of [start, end) to *out, in order. False, appending nothing, when
  // they cannot be learnt: the pagemap cannot be read, or, without PAGEMAP_SCAN, the range is
  // larger than kMaxReadRange.
  bool Append(uint64_t start, uint64_t end, std::vector<std::pair<uint64_t, uint64_t>>* out);

  // Without PAGEMAP_SCAN: 64 GiB is 128 MiB of pagemap, about a tenth of a second.
  static constexpr uint64_t kMaxReadRange = uint64_t{64} << 30;

 private:
  bool AppendScanned(uint64_t start, uint64_t end, std::vector<std::pair<uint64_t, uint64_t>>* out);
  bool AppendRead(uint64_t start, uint64_t end, std::vector<std::pair<uint64_t, uint64_t>>* out);

  int fd_;
  uint64_t page_size_;
  bool scan_works_ = true;  // until PAGEMAP_SCAN says it is not there
};

}  // namespace droidheap

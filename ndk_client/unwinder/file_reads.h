// Reads of the files a profiled process maps, which that process may have made to cost as much as
// it likes: a sparse file's hole reads as zeros (terabytes of them, that cost its writer nothing on
// disk), and a header may claim any size. So every read of a table is charged to a ReadAllowance
// (what one unwind may read, what one file's tables may hold) and refused where the range holds a
// hole: what the daemon reads is what the file holds on disk, and never more than allowed. The
// bytes are copied into the daemon's memory, never viewed through a mapping the process could
// truncate under the daemon (SIGBUS). Stateless helpers; any thread.
#pragma once

#include <stdint.h>

#include <vector>

#include "unwinder/mapped_file.h"

namespace droidheap {

class ReadAllowance {
 public:
  // `bytes` may be read now; `ceiling` is what a fresh allowance would grant (put_off() says
  // whether one would have granted something this one refused).
  explicit ReadAllowance(uint64_t bytes, uint64_t ceiling = UINT64_MAX)
      : remaining_(bytes), ceiling_(ceiling) {}

  // Takes `bytes` from what remains; false, taking nothing, when less remains.
  bool Take(uint64_t bytes) {
    if (bytes > remaining_) {
      exhausted_ = true;
      put_off_ = put_off_ || bytes <= ceiling_;
      return false;
    }
    remaining_ -= bytes;
    return true;
  }
  uint64_t remaining() const { return remaining_; }
  // Something was refused.
  bool exhausted() const { return exhausted_; }
  // Something was refused that fits under the ceiling: worth trying again with a fresh allowance.
  bool put_off() const { return put_off_; }

 private:
  uint64_t remaining_;
  uint64_t ceiling_;
  bool exhausted_ = false;
  bool put_off_ = false;
};

// Whether [offset, offset + size) of `fd` holds a hole. False where the file system cannot say
// (it then keeps no holes).
bool HasHole(int fd, uint64_t offset, uint64_t size);

// The bytes of one ELF file inside the file a process maps (the whole file, or an APK's entry),
// read through `fd`: every read checked to stay inside `location`.
struct ElfBytes {
  int fd;
  ElfLocation location;

  // Exactly `size` bytes at the ELF file's `offset`; small reads of headers, not charged.
  bool Read(uint64_t offset, void* out, uint64_t size) const;
  // A table's bytes: replaces `*out` with them when they lie in the ELF file, hold no hole and
  // `allowance` covers them.
  bool ReadTable(uint64_t offset, uint64_t size, ReadAllowance* allowance,
                 std::vector<uint8_t>* out) const;
};

}  // namespace droidheap

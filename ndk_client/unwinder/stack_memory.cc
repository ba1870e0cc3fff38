#include "unwinder/stack_memory.h"

#include <string.h>
#include <unistd.h>

namespace droidheap {

bool StackMemory::ReadWord(uint64_t address, uint64_t* value) const {
  if (address >= copy_start_ && address - copy_start_ <= copy_size_ &&
      copy_size_ - (address - copy_start_) >= sizeof(uint64_t)) {
    memcpy(value, copy_ + (address - copy_start_), sizeof(uint64_t));
    return true;
  }
  if (mem_fd_ < 0) return false;
  return pread(mem_fd_, value, sizeof(uint64_t), static_cast<off_t>(address)) ==
         static_cast<ssize_t>(sizeof(uint64_t));
}

uint64_t StripPointerAuthentication(uint64_t pc) {
#if defined(__aarch64__)
  // User-space addresses fit in 48 bits; PAC and top-byte tags live above.
  return pc & ((uint64_t{1} << 48) - 1);
#else
  return pc;
#endif
}

}  // namespace droidheap

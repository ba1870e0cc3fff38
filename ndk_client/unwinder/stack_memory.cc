#include "unwinder/frame_pointer_unwinder.h"

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

void UnwindFramePointers(uint64_t pc, uint64_t fp, uint64_t stack_top, const StackMemory& memory,
                         size_t max_frames, UnwindResult* result) {
  result->pcs.clear();
  result->error = UnwindError::kNone;
  result->pcs.push_back(StripPointerAuthentication(pc));
  while (fp != 0) {
    if (stack_top != 0 && fp + 2 * sizeof(uint64_t) > stack_top) return;
    if (result->pcs.size() >= max_frames) {
      result->error = UnwindError::kMaxFrames;
      return;
    }
    uint64_t next_fp = 0;
    uint64_t return_address = 0;
    if (fp % sizeof(uint64_t) != 0 || !memory.ReadWord(fp, &next_fp) ||
        !memory.ReadWord(fp + sizeof(uint64_t), &return_address)) {
      result->error = UnwindError::kMemoryInvalid;
      return;
    }
    return_address = StripPointerAuthentication(return_address);
    if (return_address == 0) return;  // the outermost frame (e.g. _start or thread start)
    result->pcs.push_back(return_address);
    // The stack grows down: each caller's frame record sits above its callee's. With the whole
    // stack in hand, a chain that stops doing so ends in code without frame pointers.
    if (next_fp != 0 && next_fp <= fp) {
      if (stack_top == 0) result->error = UnwindError::kBadFrameChain;
      return;
    }
    fp = next_fp;
  }
}

}  // namespace droidheap

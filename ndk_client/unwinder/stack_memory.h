// Walks the frame-pointer chain of a sampled allocation. Memory comes from the raw stack copy sent
// with the record where it covers an address, and from the target's /proc/pid/mem otherwise.
// Stateless; called by the unwinding worker that owns the record.
//
// Frame record layout, the same on x86_64 and aarch64 (AAPCS64 frame records):
//   [fp + 0] = caller's fp    [fp + 8] = return address into the caller
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace droidheap {

// Memory of the profiled process as seen while unwinding one record.
class StackMemory {
 public:
  StackMemory(uint64_t copy_start, const uint8_t* copy, size_t copy_size, int mem_fd)
      : copy_start_(copy_start), copy_(copy), copy_size_(copy_size), mem_fd_(mem_fd) {}
  bool ReadWord(uint64_t address, uint64_t* value) const;
  uint64_t copy_end() const { return copy_start_ + copy_size_; }

 private:
  uint64_t copy_start_;
  const uint8_t* copy_;
  size_t copy_size_;
  int mem_fd_;
};

enum class UnwindError : uint32_t {
  kNone = 0,
  kMemoryInvalid = 1,  // a frame record could not be read
  kMaxFrames = 2,      // the stack was deeper than the limit
  kBadFrameChain = 3,  // frame pointers did not move up the stack
};

struct UnwindResult {
  std::vector<uint64_t> pcs;  // innermost first; pcs[0] is the sampled pc, the rest return addresses
  UnwindError error = UnwindError::kNone;
};

// `stack_top` (0 = unknown) is the end of the thread's stack when the copy reached it: a frame
// pointer outside [fp, stack_top) then marks the end of the chain (code without frame pointers
// uses the register for data, as glibc's thread and process start do), not an error. Stacks cut
// short by such code are the DWARF unwinder's job.
void UnwindFramePointers(uint64_t pc, uint64_t fp, uint64_t stack_top, const StackMemory& memory,
                         size_t max_frames, UnwindResult* result);

// Removes pointer-authentication bits from a return address (aarch64); identity elsewhere.
uint64_t StripPointerAuthentication(uint64_t pc);

}  // namespace droidheap

// The profiled process's memory as the unwinder sees it while unwinding one sampled allocation:
// the raw stack copy sent with the record where it covers an address, the target's /proc/pid/mem
// otherwise: through the worker's RemoteMemory (a few blocks kept, the reads per unwind capped),
// or, built with a bare fd (tests, benchmarks), a word at a time. A view; the record, the fd and
// the RemoteMemory belong to the unwinding worker.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "unwinder/registers.h"
#include "unwinder/remote_memory.h"

namespace droidheap {

// A word an unwind read (from the stack copy, or past it from the process), and what it held.
struct WordRead {
  uint64_t address;
  uint64_t value;
};

class StackMemory {
 public:
  StackMemory(uint64_t copy_start, const uint8_t* copy, size_t copy_size, int mem_fd)
      : copy_start_(copy_start), copy_(copy), copy_size_(copy_size), mem_fd_(mem_fd) {}
  // Past the copy, `process` is read (Begin'd by the caller for this unwind).
  StackMemory(uint64_t copy_start, const uint8_t* copy, size_t copy_size, RemoteMemory* process)
      : copy_start_(copy_start), copy_(copy), copy_size_(copy_size), process_(process) {}
  // One word of the target: `size` bytes (its word size, 4 or 8), zero-extended. Inline: the
  // unwinder reads a few words per frame, nearly all from the copy.
  bool ReadWord(uint64_t address, uint32_t size, uint64_t* value) const {
    if (!ReadCopiedWord(address, size, value) && !ReadWordFromProcess(address, size, value)) {
      return false;
    }
    if (reads_ != nullptr) reads_->push_back({address, *value});
    return true;
  }

  // A word of the copy alone: false where the copy does not cover it.
  bool ReadCopiedWord(uint64_t address, uint32_t size, uint64_t* value) const {
    const uint64_t offset = address - copy_start_;
    if (address >= copy_start_ && offset <= copy_size_ && copy_size_ - offset >= size) {
      // Each size its own constant-size copy: one load, where a copy of `size` bytes cost a
      // library call's worth of instructions on every saved register of every frame.
      if (size == 8) {
        memcpy(value, copy_ + offset, 8);
        return true;
      }
      if (size == 4) {
        uint32_t word;
        memcpy(&word, copy_ + offset, 4);
        *value = word;
        return true;
      }
    }
    return false;
  }

  // From now on every word read is appended to `reads` (nullptr: none is).
  void RecordReads(std::vector<WordRead>* reads) { reads_ = reads; }

 private:
  bool ReadWordFromProcess(uint64_t address, uint32_t size, uint64_t* value) const;

  uint64_t copy_start_;
  const uint8_t* copy_;
  size_t copy_size_;
  int mem_fd_ = -1;
  RemoteMemory* process_ = nullptr;
  std::vector<WordRead>* reads_ = nullptr;
};

// A code address as found in a register or a frame, made a plain address: pointer-authentication
// bits stripped (arm64), the Thumb bit cleared (armeabi-v7a); unchanged elsewhere.
uint64_t NormalizePc(const RegisterLayout& layout, uint64_t pc);

}  // namespace droidheap

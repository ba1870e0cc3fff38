// A profiled process's memory past its stack copy, read through the /proc/pid/mem fd it passed,
// for one unwind at a time: by aligned blocks, the last few kept, and at most kMaxReads reads per
// unwind. A word at a time, a stack whose frame records the copy does not hold (a deep stack, or a
// record a hostile client sent without its copy, its frame pointer aimed at a long chain in its
// memory) cost two reads of /proc/pid/mem per frame: 500 system calls per sample. Blocks make
// that a read per page the frames lie in, and the cap bounds what any one sample can cost.
//
// Owned by one unwinding worker and reused for every unwind (not thread-safe). Nothing is kept
// across unwinds: the process's memory changes between its samples. Allocates its blocks once.
// Header-only: the unwinder and the daemon core both use it, and it is small.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "common/platform.h"

namespace droidheap {

class RemoteMemory {
 public:
  // 4 KiB, aligned: a block lies within one page whatever the page size, so it reads whole where
  // the words it holds would read, and fails where they would fail.
  static constexpr size_t kBlockSize = 4096;
  static constexpr size_t kCachedBlocks = 8;
  // Reads of the process per unwind: 128 KiB of stack past the copy, read a page at a time.
  static constexpr uint32_t kMaxReads = 32;

  RemoteMemory() : data_(kCachedBlocks * kBlockSize) {}

  // A new unwind of the process whose memory `mem_fd` reads (-1: none; every read fails).
  void Begin(int mem_fd);
  // `size` bytes (4 or 8) at `address`, zero-extended; false where the process has no such memory
  // or this unwind's reads are spent.
  bool ReadWord(uint64_t address, uint32_t size, uint64_t* value);

  // This unwind's reads of the process, and whether it wanted more than kMaxReads.
  uint32_t reads() const { return reads_; }
  bool exhausted() const { return exhausted_; }

 private:
  struct Block {
    uint64_t address = 0;
    bool valid = false;   // holds this unwind's read of `address`
    bool readable = false;  // the read succeeded (a failed one is kept too: not read again)
  };
  // The block starting at `address` (aligned), read now unless kept; nullptr when unreadable.
  const uint8_t* BlockAt(uint64_t address);

  int mem_fd_ = -1;
  Block blocks_[kCachedBlocks];
  std::vector<uint8_t> data_;  // kCachedBlocks blocks' bytes
  size_t next_victim_ = 0;
  uint32_t reads_ = 0;
  bool exhausted_ = false;
};

inline void RemoteMemory::Begin(int mem_fd) {
  mem_fd_ = mem_fd;
  for (Block& block : blocks_) block.valid = false;
  next_victim_ = 0;
  reads_ = 0;
  exhausted_ = false;
}

inline const uint8_t* RemoteMemory::BlockAt(uint64_t address) {
  for (size_t i = 0; i < kCachedBlocks; ++i) {
    if (blocks_[i].valid && blocks_[i].address == address) {
      return blocks_[i].readable ? &data_[i * kBlockSize] : nullptr;
    }
  }
  if (mem_fd_ < 0 || address > static_cast<uint64_t>(INT64_MAX) - kBlockSize) return nullptr;
  if (reads_ >= kMaxReads) {
    exhausted_ = true;
    return nullptr;
  }
  ++reads_;
  // Round robin: an unwind walks up the stack, so the block read longest ago is the one done with.
  const size_t i = next_victim_;
  next_victim_ = (next_victim_ + 1) % kCachedBlocks;
  uint8_t* bytes = &data_[i * kBlockSize];
  const ssize_t n = pread(mem_fd_, bytes, kBlockSize, static_cast<off_t>(address));
  blocks_[i] = {address, true, n == static_cast<ssize_t>(kBlockSize)};
  return blocks_[i].readable ? bytes : nullptr;
}

inline bool RemoteMemory::ReadWord(uint64_t address, uint32_t size, uint64_t* value) {
  *value = 0;
  if ((size != 4 && size != 8) || address > UINT64_MAX - size) return false;
  uint8_t word[8];
  // A word across two blocks (no unwind table puts one there, but a hostile one may) is read
  // from both.
  for (uint32_t done = 0; done < size;) {
    const uint64_t at = address + done;
    const uint64_t start = at & ~(uint64_t{kBlockSize} - 1);
    const uint8_t* block = BlockAt(start);
    if (block == nullptr) return false;
    const uint32_t offset = static_cast<uint32_t>(at - start);
    const uint32_t n = static_cast<uint32_t>(
        size - done < kBlockSize - offset ? size - done : kBlockSize - offset);
    memcpy(word + done, block + offset, n);
    done += n;
  }
  if (size == 8) {
    memcpy(value, word, 8);
  } else {
    uint32_t narrow;
    memcpy(&narrow, word, 4);
    *value = narrow;
  }
  return true;
}

}  // namespace droidheap

// Which heap blocks a process can no longer reach: a conservative mark, as a garbage collector that
// cannot tell pointers from numbers makes it (and as LeakSanitizer does). Every aligned word of the
// roots that holds an address inside a block marks that block, and the words of every marked
// block are followed in turn; what stays unmarked is unreachable. A word that only looks like a
// pointer keeps a block: the sweep errs toward "reachable", never the other way.
//
// The caller says what the blocks and the roots are (root_ranges.h takes them from a snapshot):
// at -i 1, or with every block the allocator holds, the roots are the memory that is not the
// allocator's; with sampled blocks only, every writable byte that is not one of those blocks.
// A root range is scanned except where it overlaps a block: a block is followed only once marked.
//
// Owned by one thread (a worker's sweeper: daemon/unreachable_sweeper.h); reads the process
// through a MemorySource, a snapshot that does not change while the sweep runs. Its cost grows
// with the bytes it reads and the blocks it is given, its memory with the blocks (a few words
// each) and a bounded read buffer, whatever the process's memory holds.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <utility>
#include <vector>

namespace droidheap {

// Where the sweep reads the process's memory.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // Reads `size` bytes at `address` into `out`; returns how many it read from the start, fewer
  // where the memory ends or cannot be read.
  virtual size_t Read(uint64_t address, void* out, size_t size) = 0;
};

// An address of a process with `word_size`-byte words as the sweep compares it: on 64-bit, its top
// byte cleared (Android 11+ tags heap pointers with 0xb4 there on arm64; MTE keeps its tags there).
inline uint64_t UntaggedAddress(uint64_t address, uint32_t word_size) {
  return word_size == 4 ? address : address & 0x00ffffffffffffffull;
}

struct HeapBlock {
  uint64_t address = 0;
  // Bytes a pointer into the block may point at; 0 counts as 1 (a malloc(0) block is kept by a
  // pointer to its start).
  uint64_t size = 0;
};

struct SweepRoots {
  // [start, end) ranges of memory scanned for pointers, in any order, possibly overlapping
  // blocks (those bytes are skipped) and each other.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  // Values that are roots themselves: the threads' registers.
  std::vector<uint64_t> words;
};

struct SweepFigures {
  uint64_t root_bytes = 0;   // bytes of root ranges read
  uint64_t block_bytes = 0;  // bytes of marked blocks read
  uint64_t unreadable_bytes = 0;  // of either, bytes the source could not read (skipped)
  uint64_t reads = 0;  // MemorySource::Read calls
};

class HeapSweep {
 public:
  // `word_size`: 8 or 4, the process's pointer size; words are read at multiples of it. On a
  // 64-bit process the top byte of every word is cleared before it is compared (Android's heap
  // pointer tags, 0xB4 in Scudo's; MTE's in bits 56-59). Blocks that overlap an earlier one (by
  // address) are dropped as not blocks; their index reads as reachable. A block's address is
  // stripped of its tag too, so the caller may pass the allocator's (tagged) pointers.
  HeapSweep(const std::vector<HeapBlock>& blocks, uint32_t word_size);

  // Marks everything reachable from `roots`, reading through `memory`. Once.
  void Run(const SweepRoots& roots, MemorySource* memory);

  // By the index of the block in the vector given to the constructor (false past its end).
  bool reachable(size_t index) const;
  const SweepFigures& figures() const { return figures_; }

 private:
  // A 4 KiB granule at level 0, 64 times larger at each level up: a block is indexed at the lowest
  // level where it spans at most 64 granules, so a block has at most 64 entries (and at most
  // 2 + size / 4 KiB) whatever size the process claims for it. Level 8's granules are 2^60 bytes.
  static constexpr uint32_t kLevels = 9;

  // The blocks (by id, their rank by address) that overlap one granule: all of them, whatever
  // their level, so a lookup that finds the entry needs to look no further.
  struct GranuleEntry {
    uint64_t key;  // level in the top 4 bits, then the granule's number
    uint32_t first;
    uint32_t last;
  };

  void BuildIndex();
  uint32_t Find(uint64_t address) const;
  void MarkWord(uint64_t word);
  template <typename Word>
  void ScanWords(const uint8_t* bytes, size_t size);
  void Scan(const uint8_t* bytes, size_t size);
  template <typename Pieces>
  void ScanPieces(Pieces pieces, uint64_t* read_bytes);

  uint32_t word_size_;
  uint64_t word_mask_;  // what of a word can be an address
  // The blocks kept, by id: [start, end) with end = start + max(size, 1), disjoint and ascending.
  std::vector<uint64_t> start_;
  std::vector<uint64_t> end_;
  std::vector<uint32_t> id_of_;  // by constructor index; kDropped for a dropped block
  std::vector<uint8_t> marked_;  // by id
  // Every marked id, each once, in batches: Run sorts and reads one batch while marking the next.
  std::vector<uint32_t> worklist_;
  // Open addressing, linear probing, at most half full; the multiplier is chosen per sweep because
  // custom heaps let the process choose block addresses, and so which granules collide.
  std::vector<GranuleEntry> table_;
  uint32_t table_bits_ = 0;
  uint64_t multiplier_ = 1;
  uint64_t low_ = 0;   // lowest start
  uint64_t high_ = 0;  // highest end
  uint64_t level_low_[kLevels];
  uint64_t level_high_[kLevels];
  // The block the last word hit once it is marked: neighbouring words often point into one block.
  uint64_t hit_start_ = 0;
  uint64_t hit_end_ = 0;
  MemorySource* memory_ = nullptr;
  std::vector<uint8_t> buffer_;
  bool ran_ = false;
  SweepFigures figures_;
};

}  // namespace droidheap

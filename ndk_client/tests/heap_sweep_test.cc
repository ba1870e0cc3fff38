// HeapSweep: what a conservative mark keeps (root words, interior and tagged pointers, registers,
// pointers held only in the heap) and what it does not (cycles, a dropped list, one past the end,
// block bytes inside a root range, unaligned words), over a synthetic address space; and what it
// costs on hostile shapes (a million-block cycle and list, 64 MiB of words that all point into
// the heap), measured in reads and bytes, with the time printed.
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "reachability/heap_sweep.h"
#include "tests/test_util.h"

using droidheap::HeapBlock;
using droidheap::HeapSweep;
using droidheap::MemorySource;
using droidheap::SweepRoots;

namespace {

// Regions of bytes at fake addresses; reading stops at the first byte no region holds.
class FakeMemory : public MemorySource {
 public:
  uint8_t* Add(uint64_t address, size_t size) {
    std::vector<uint8_t>& bytes = regions_[address];
    bytes.assign(size, 0);
    return bytes.data();
  }

  void Put64(uint64_t address, uint64_t value) { memcpy(At(address, 8), &value, 8); }
  void Put32(uint64_t address, uint32_t value) { memcpy(At(address, 4), &value, 4); }

  size_t Read(uint64_t address, void* out, size_t size) override {
    ++reads;
    bytes_asked += size;
    size_t done = 0;
    while (done < size) {
      auto it = regions_.upper_bound(address + done);
      if (it == regions_.begin()) break;
      --it;
      const uint64_t offset = address + done - it->first;
      if (offset >= it->second.size()) break;
      const size_t n = std::min<size_t>(size - done, it->second.size() - offset);
      memcpy(static_cast<uint8_t*>(out) + done, it->second.data() + offset, n);
      done += n;
    }
    return done;
  }

  uint64_t reads = 0;
  uint64_t bytes_asked = 0;

 private:
  uint8_t* At(uint64_t address, size_t size) {
    auto it = regions_.upper_bound(address);
    CHECK(it != regions_.begin());
    --it;
    CHECK(address - it->first + size <= it->second.size());
    return it->second.data() + (address - it->first);
  }

  std::map<uint64_t, std::vector<uint8_t>> regions_;
};

SweepRoots Range(uint64_t start, uint64_t end) {
  SweepRoots roots;
  roots.ranges.push_back({start, end});
  return roots;
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

constexpr uint64_t kRoots = 0x10000;
constexpr uint64_t kHeap = 0x7a0000000000;

void TestWhatKeepsABlock() {
  FakeMemory memory;
  memory.Add(kRoots, 0x100);
  const std::vector<HeapBlock> blocks = {
      {kHeap + 0x0000, 64},   // 0: its start in a root
      {kHeap + 0x1000, 64},   // 1: an interior pointer
      {kHeap + 0x2000, 64},   // 2: a register
      {kHeap + 0x3000, 64},   // 3: only one past its end
      {kHeap + 0x4000, 0},    // 4: malloc(0), its start
      {kHeap + 0x5000, 64},   // 5: nothing
      {kHeap + 0x6000, 64},   // 6: a tagged pointer
      {kHeap + 0x7000, 64},   // 7: an unaligned word
  };
  memory.Put64(kRoots + 0x00, kHeap);
  memory.Put64(kRoots + 0x08, kHeap + 0x1000 + 40);
  memory.Put64(kRoots + 0x10, kHeap + 0x3000 + 64);
  memory.Put64(kRoots + 0x18, kHeap + 0x4000);
  memory.Put64(kRoots + 0x20, 0xb400000000000000ull | (kHeap + 0x6000 + 8));
  memory.Put64(kRoots + 0x2c, kHeap + 0x7000);  // straddles two aligned words
  SweepRoots roots = Range(kRoots, kRoots + 0x100);
  roots.words = {12345, kHeap + 0x2000 + 63};
  HeapSweep sweep(blocks, 8);
  sweep.Run(roots, &memory);
  const bool expected[] = {true, true, true, false, true, false, true, false};
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i) == expected[i]);
  CHECK(!sweep.reachable(blocks.size()));
  CHECK(sweep.figures().root_bytes == 0x100);
  // No memory behind the blocks here; block 4 has no whole word to read at all.
  CHECK(sweep.figures().block_bytes == 0);
  CHECK(sweep.figures().unreadable_bytes == 4 * 64);
}

// A list of five: unreachable as a whole once its head is dropped; kept whole from a root.
void TestListsAndCycles() {
  for (bool rooted : {false, true}) {
    FakeMemory memory;
    memory.Add(kRoots, 16);
    memory.Add(kHeap, 0x10000);
    std::vector<HeapBlock> blocks;
    for (uint64_t i = 0; i < 5; ++i) blocks.push_back({kHeap + 0x1000 * (4 - i), 32});
    for (size_t i = 0; i + 1 < 5; ++i) memory.Put64(blocks[i].address + 16, blocks[i + 1].address);
    // Two blocks pointing only at each other, and a chain held only inside the heap.
    blocks.push_back({kHeap + 0x8000, 32});
    blocks.push_back({kHeap + 0x8020, 32});
    memory.Put64(kHeap + 0x8000, kHeap + 0x8020);
    memory.Put64(kHeap + 0x8020, kHeap + 0x8000);
    blocks.push_back({kHeap + 0x9000, 32});  // 7 <- root
    blocks.push_back({kHeap + 0xa000, 32});  // 8 <- 7
    blocks.push_back({kHeap + 0xb000, 32});  // 9 <- 8
    memory.Put64(kHeap + 0x9000 + 24, kHeap + 0xa000);
    memory.Put64(kHeap + 0xa000, kHeap + 0xb000 + 4);
    memory.Put64(kRoots + 8, kHeap + 0x9000);
    if (rooted) memory.Put64(kRoots, blocks[0].address);
    HeapSweep sweep(blocks, 8);
    sweep.Run(Range(kRoots, kRoots + 16), &memory);
    for (size_t i = 0; i < 5; ++i) CHECK(sweep.reachable(i) == rooted);
    CHECK(!sweep.reachable(5) && !sweep.reachable(6));
    CHECK(sweep.reachable(7) && sweep.reachable(8) && sweep.reachable(9));
    CHECK(sweep.figures().unreadable_bytes == 0);
  }
}

// With the heap mapping itself a root (sampled blocks), the bytes between blocks are roots and
// the blocks' own bytes are not.
void TestRootRangeOverlappingBlocks() {
  FakeMemory memory;
  memory.Add(kHeap, 0x2000);
  const std::vector<HeapBlock> blocks = {
      {kHeap + 0x100, 64},  // 0: points at itself
      {kHeap + 0x200, 64},  // 1: points at 2
      {kHeap + 0x300, 64},  // 2
      {kHeap + 0x400, 64},  // 3: held by a word between blocks
      {kHeap + 0x500, 60},  // 4: held by a word just past block 5's unaligned end
      {kHeap + 0x600, 61},  // 5
      {kHeap + 0x700, 64},  // 6: held by a word that straddles block 5's end
  };
  memory.Put64(kHeap + 0x108, kHeap + 0x100);
  memory.Put64(kHeap + 0x200, kHeap + 0x300);
  memory.Put64(kHeap + 0x180, kHeap + 0x400);
  memory.Put64(kHeap + 0x640, kHeap + 0x500);
  memory.Put64(kHeap + 0x638, kHeap + 0x700);
  SweepRoots roots = Range(kHeap, kHeap + 0x2000);
  roots.ranges.push_back({kHeap + 0x1000, kHeap + 0x1800});  // overlapping: read once
  HeapSweep sweep(blocks, 8);
  sweep.Run(roots, &memory);
  const bool expected[] = {false, false, false, true, true, false, false};
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i) == expected[i]);
  CHECK(sweep.figures().root_bytes == 0x2000 - 6 * 64 - 64);  // 5's 61 bytes round up to 64
  CHECK(sweep.figures().block_bytes == 64 + 56);
  CHECK(sweep.figures().reads == 2);
}

// A 32-bit process: 4-byte words at multiples of 4, nothing stripped.
void TestFourByteWords() {
  FakeMemory memory;
  memory.Add(0x8000, 0x40);
  memory.Add(0x40000000, 0x100);
  const std::vector<HeapBlock> blocks = {
      {0x40000000, 16},  // 0: a 4-byte word at an offset of 4
      {0x40000010, 16},  // 1: the low half of a tagged word on 64-bit; here the tag stays
      {0xb4000020, 16},  // 2: a tagged word's whole value
      {0x40000030, 16},  // 3: an unaligned word
      {0x40000040, 16},  // 4: held only by 0
      {0x40000050, 16},  // 5: a register
  };
  memory.Put32(0x8004, 0x40000000);
  memory.Put32(0x8008, 0xb4000010);
  memory.Put32(0x800c, 0xb4000020);
  memory.Put32(0x8012, 0x40000030);
  memory.Put32(0x40000000 + 12, 0x40000040 + 15);
  SweepRoots roots = Range(0x8000, 0x8040);
  roots.words = {0x40000050 + 3};
  HeapSweep sweep(blocks, 4);
  sweep.Run(roots, &memory);
  const bool expected[] = {true, false, true, false, true, true};
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i) == expected[i]);
  CHECK(sweep.figures().root_bytes == 0x40);
}

// Blocks given out of order; one overlapping an earlier block, or at the same address as one
// given before it, is no block (reachable) and hides nothing of the root range.
void TestOverlappingBlocksAreDropped() {
  FakeMemory memory;
  memory.Add(kHeap, 0x1000);
  const std::vector<HeapBlock> blocks = {
      {kHeap + 0x180, 0x100},  // 0: overlaps 1
      {kHeap + 0x100, 0x100},  // 1
      {kHeap + 0x100, 0x10},   // 2: 1's address, given after it
      {kHeap + 0x260, 0x20},   // 3: overlaps only 0, which is not a block
      {kHeap + 0x400, 0x20},   // 4: held by a word in 0's bytes past 1's end
  };
  memory.Put64(kHeap + 0x240, kHeap + 0x400);
  HeapSweep sweep(blocks, 8);
  sweep.Run(Range(kHeap, kHeap + 0x1000), &memory);
  const bool expected[] = {true, false, true, false, true};
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i) == expected[i]);
}

// A short read gives up on the rest of its root range or block, counted; neighbours read in the
// same Read past the hole are read again.
void TestUnreadableMemory() {
  FakeMemory memory;
  memory.Add(kRoots, 0x1000);
  memory.Add(kRoots + 0x2000, 0x1000);  // past a hole: lost with the rest of the range
  memory.Add(kRoots + 0x4000, 0x100);   // another range
  memory.Add(kHeap, 0x1000);
  memory.Add(kHeap + 0x1400, 0x1000);   // 0x400 unreadable bytes between
  const std::vector<HeapBlock> blocks = {
      {kHeap + 0xfe0, 64},   // 0: half readable; its readable half holds 2
      {kHeap + 0x1400, 32},  // 1: read after the hole, in the same group as 0; holds 3
      {kHeap + 0x1800, 32},  // 2
      {kHeap + 0x1900, 32},  // 3
      {kHeap + 0x1a00, 32},  // 4: held only from the range past the hole
      {kHeap + 0x1b00, 32},  // 5: held only by 0's unreadable half
      {kHeap + 0x1c00, 32},  // 6: held from the second range
  };
  memory.Put64(kRoots, blocks[0].address);
  memory.Put64(kRoots + 8, blocks[1].address);
  memory.Put64(kRoots + 0x2000, blocks[4].address);
  memory.Put64(kRoots + 0x4000, blocks[6].address);
  memory.Put64(kHeap + 0xfe8, blocks[2].address);
  memory.Put64(kHeap + 0x1410, blocks[3].address);
  SweepRoots roots = Range(kRoots, kRoots + 0x3000);
  roots.ranges.push_back({kRoots + 0x4000, kRoots + 0x4100});
  HeapSweep sweep(blocks, 8);
  sweep.Run(roots, &memory);
  const bool expected[] = {true, true, true, true, false, false, true};
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i) == expected[i]);
  CHECK(sweep.figures().root_bytes == 0x1000 + 0x100);
  CHECK(sweep.figures().block_bytes == 32 + 32 + 32 * 3);
  CHECK(sweep.figures().unreadable_bytes == 0x2000 + 32);
}

// Blocks far larger than a granule, and sizes no process could have: found by interior pointers,
// found in the granules they share with small blocks, and indexed in a bounded number of entries.
void TestLargeBlocks() {
  FakeMemory memory;
  memory.Add(kRoots, 0x100);
  const uint64_t big = kHeap + 0x100;
  const uint64_t huge = 0x200000000000;
  const std::vector<HeapBlock> blocks = {
      {kHeap, 0x40},                     // 0: shares big's first granule
      {big, 10 << 20},                   // 1: a pointer 5 MiB in
      {big + (10 << 20) + 0x10, 0x40},   // 2: shares big's last granule
      {huge, 1ull << 40},                // 3: a terabyte, a pointer 2^39 in
      {huge + (1ull << 40), 1ull << 44},  // 4: right after it; nothing points in
      {big + (10 << 20) + 0x1000, 0x40},  // 5: nothing points in
  };
  memory.Put64(kRoots, big + (5 << 20));
  memory.Put64(kRoots + 8, blocks[2].address + 0x3f);
  memory.Put64(kRoots + 16, huge + (1ull << 39));
  memory.Put64(kRoots + 24, big + (10 << 20));  // one past big's end, in a gap
  memory.Put64(kRoots + 32, big - 0x10);        // in the gap before big
  HeapSweep sweep(blocks, 8);
  sweep.Run(Range(kRoots, kRoots + 0x100), &memory);
  const bool expected[] = {false, true, true, true, false, false};
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i) == expected[i]);
  // Nothing behind the blocks: one failed Read each, the terabyte included.
  CHECK(sweep.figures().reads == 1 + 3);
  CHECK(sweep.figures().unreadable_bytes == (10 << 20) + 0x40 + (1ull << 40));
}

// Many small blocks marked together are read together.
void TestNeighboursShareARead() {
  FakeMemory memory;
  memory.Add(kRoots, 1000 * 8);
  memory.Add(kHeap, 1000 * 64);
  std::vector<HeapBlock> blocks;
  for (uint64_t i = 0; i < 1000; ++i) {
    blocks.push_back({kHeap + i * 64, 48});
    memory.Put64(kRoots + i * 8, kHeap + (999 - i) * 64 + 8);
  }
  HeapSweep sweep(blocks, 8);
  sweep.Run(Range(kRoots, kRoots + 1000 * 8), &memory);
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(sweep.reachable(i));
  CHECK(sweep.figures().reads == 2);
  CHECK(sweep.figures().block_bytes == 1000 * 48);
}

// Blocks whose memory cannot be read at all (the process's list may hold any addresses): one
// failed Read a block at most, however many share a group.
void TestUnreadableBlocksCostARead() {
  constexpr uint64_t kBlocks = 100000;
  FakeMemory memory;
  uint8_t* roots_bytes = memory.Add(kRoots, kBlocks * 8);
  std::vector<HeapBlock> blocks;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    blocks.push_back({kHeap + i * 16, 16});
    const uint64_t word = kHeap + i * 16;
    memcpy(roots_bytes + i * 8, &word, 8);
  }
  const auto start = std::chrono::steady_clock::now();
  HeapSweep sweep(blocks, 8);
  sweep.Run(Range(kRoots, kRoots + kBlocks * 8), &memory);
  const double ms = MillisecondsSince(start);
  for (size_t i = 0; i < kBlocks; ++i) CHECK(sweep.reachable(i));
  CHECK(sweep.figures().reads == 1 + kBlocks);
  CHECK(sweep.figures().unreadable_bytes == kBlocks * 16 && sweep.figures().block_bytes == 0);
  printf("100,000 unreadable blocks: %.0f ms, %llu reads\n", ms,
         static_cast<unsigned long long>(sweep.figures().reads));
}

constexpr uint64_t kMillion = 1000000;

// A million blocks of 32 bytes, each pointing at the next (`step` 1) or the one before (`step`
// -1), the last wrapping around to the first when `cycle`.
void BuildChain(FakeMemory* memory, std::vector<HeapBlock>* blocks, int step, bool cycle) {
  uint8_t* bytes = memory->Add(kHeap, kMillion * 32);
  for (uint64_t i = 0; i < kMillion; ++i) {
    blocks->push_back({kHeap + i * 32, 32});
    const int64_t next = static_cast<int64_t>(i) + step;
    if (!cycle && (next < 0 || next >= static_cast<int64_t>(kMillion))) continue;
    const uint64_t target = kHeap + ((next + kMillion) % kMillion) * 32;
    memcpy(bytes + i * 32 + 8, &target, 8);
  }
}

void TestMillionBlockShapes() {
  {
    FakeMemory memory;
    std::vector<HeapBlock> blocks;
    BuildChain(&memory, &blocks, 1, true);
    auto start = std::chrono::steady_clock::now();
    HeapSweep sweep(blocks, 8);
    const double build_ms = MillisecondsSince(start);
    start = std::chrono::steady_clock::now();
    sweep.Run(SweepRoots(), &memory);
    const double run_ms = MillisecondsSince(start);
    for (size_t i = 0; i < kMillion; ++i) CHECK(!sweep.reachable(i));
    CHECK(sweep.figures().reads == 0);
    printf("1M-block cycle, unreachable: index %.0f ms, sweep %.0f ms, %llu reads\n", build_ms,
           run_ms, static_cast<unsigned long long>(sweep.figures().reads));
  }
  for (int step : {1, -1}) {
    FakeMemory memory;
    std::vector<HeapBlock> blocks;
    BuildChain(&memory, &blocks, step, step == 1);
    SweepRoots roots;
    roots.words = {blocks[step == 1 ? 0 : kMillion - 1].address + 16};
    auto start = std::chrono::steady_clock::now();
    HeapSweep sweep(blocks, 8);
    sweep.Run(roots, &memory);
    const double ms = MillisecondsSince(start);
    for (size_t i = 0; i < kMillion; ++i) CHECK(sweep.reachable(i));
    // One block a batch, hence one Read a block: never more.
    CHECK(sweep.figures().reads == kMillion && memory.reads == kMillion);
    CHECK(sweep.figures().block_bytes == kMillion * 32);
    CHECK(memory.bytes_asked == kMillion * 32);
    printf("1M-block %s, rooted: %.0f ms, %llu reads, %llu block bytes\n",
           step == 1 ? "cycle" : "list in reverse", ms,
           static_cast<unsigned long long>(sweep.figures().reads),
           static_cast<unsigned long long>(sweep.figures().block_bytes));
  }
}

// 64 MiB of roots, every word an address in the heap of 100,000 blocks (an interior pointer, a
// tagged one, or one into the gap after a block).
void TestEveryWordPointsIntoTheHeap() {
  constexpr uint64_t kBlocks = 100000;
  constexpr uint64_t kRootBytes = 64 << 20;
  FakeMemory memory;
  uint8_t* roots_bytes = memory.Add(kRoots, kRootBytes);
  memory.Add(kHeap, kBlocks * 64);
  std::vector<HeapBlock> blocks;
  for (uint64_t i = 0; i < kBlocks; ++i) blocks.push_back({kHeap + i * 64, 48});
  for (uint64_t i = 0; i < kRootBytes / 8; ++i) {
    uint64_t word = kHeap + ((i * 7919) % kBlocks) * 64 + (i % 7) * 8;
    if (i % 3 == 0) word |= 0xb400000000000000ull;
    memcpy(roots_bytes + i * 8, &word, 8);
  }
  const auto start = std::chrono::steady_clock::now();
  HeapSweep sweep(blocks, 8);
  sweep.Run(Range(kRoots, kRoots + kRootBytes), &memory);
  const double ms = MillisecondsSince(start);
  for (size_t i = 0; i < kBlocks; ++i) CHECK(sweep.reachable(i));
  const droidheap::SweepFigures& f = sweep.figures();
  CHECK(f.root_bytes == kRootBytes && f.block_bytes == kBlocks * 48 && f.unreadable_bytes == 0);
  // 1 MiB a Read: 64 for the roots, 7 for the blocks (6.4 MB, gaps and all).
  CHECK(f.reads == 64 + 7);
  CHECK(memory.bytes_asked <= kRootBytes + kBlocks * 64);
  printf("64 MiB of pointers into 100,000 blocks: %.0f ms, %llu reads, %llu root bytes, "
         "%llu block bytes\n",
         ms, static_cast<unsigned long long>(f.reads),
         static_cast<unsigned long long>(f.root_bytes),
         static_cast<unsigned long long>(f.block_bytes));
}

// Blocks from 16 bytes to 8 MiB with gaps between, and words anywhere from the lowest block to
// past the highest: the index's answer for every word is the one a binary search gives.
void TestMixedSizesAgainstABinarySearch() {
  constexpr uint64_t kBlocks = 20000;
  constexpr uint64_t kWords = 2 << 20;
  uint64_t state = 0x853c49e6748fea9bull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  std::vector<HeapBlock> blocks;
  uint64_t address = kHeap;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    const uint64_t kind = next() % 100;
    const uint64_t size = kind < 90   ? 16 + next() % 1024
                          : kind < 99 ? 4096 + next() % (256 << 10)
                                      : (1 << 20) + next() % (8 << 20);
    address += next() % 3 == 0 ? 0 : 16 * (next() % 512);
    blocks.push_back({address, size});
    address += (size + 15) & ~15ull;
  }
  const uint64_t span = address + 4096 - kHeap;
  FakeMemory memory;
  uint8_t* roots_bytes = memory.Add(kRoots, kWords * 8);
  std::vector<uint64_t> starts;
  for (const HeapBlock& b : blocks) starts.push_back(b.address);
  std::vector<bool> expected(kBlocks, false);
  for (uint64_t i = 0; i < kWords; ++i) {
    const uint64_t word = kHeap - 4096 + (next() << 31 | next()) % (span + 4096);
    memcpy(roots_bytes + i * 8, &word, 8);
    const size_t after = std::upper_bound(starts.begin(), starts.end(), word) - starts.begin();
    if (after > 0 &&
        word < blocks[after - 1].address + std::max<uint64_t>(blocks[after - 1].size, 1)) {
      expected[after - 1] = true;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  HeapSweep sweep(blocks, 8);
  sweep.Run(Range(kRoots, kRoots + kWords * 8), &memory);
  const double ms = MillisecondsSince(start);
  size_t reachable = 0;
  for (size_t i = 0; i < kBlocks; ++i) {
    CHECK(sweep.reachable(i) == expected[i]);
    reachable += expected[i];
  }
  printf("16 MiB of words across %.1f GiB of mixed blocks: %.0f ms, %zu of %llu blocks hit\n",
         static_cast<double>(span) / (1 << 30), ms, reachable,
         static_cast<unsigned long long>(kBlocks));
}

}  // namespace

int main() {
  TestWhatKeepsABlock();
  TestListsAndCycles();
  TestRootRangeOverlappingBlocks();
  TestFourByteWords();
  TestOverlappingBlocksAreDropped();
  TestUnreadableMemory();
  TestLargeBlocks();
  TestNeighboursShareARead();
  TestUnreadableBlocksCostARead();
  TestMillionBlockShapes();
  TestEveryWordPointsIntoTheHeap();
  TestMixedSizesAgainstABinarySearch();
  return 0;
}

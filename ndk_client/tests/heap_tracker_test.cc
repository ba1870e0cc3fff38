// HeapTracker: the sequence-number rules of heap_tracker.h, and cumulative per-stack totals;
// CallstackTable's interning.
#include "daemon/callstack_table.h"
#include "daemon/heap_tracker.h"
#include "tests/test_util.h"

using droidheap::CallstackSample;
using droidheap::CallstackTable;
using droidheap::FrameInfo;
using droidheap::HeapTracker;

namespace {

CallstackSample Totals(const HeapTracker& t, uint32_t stack) {
  for (const CallstackSample& s : t.Snapshot()) {
    if (s.callstack == stack) return s;
  }
  return {};
}

void TestFreeMatchesAlloc() {
  HeapTracker t;
  uint32_t s = 0;
  t.RecordAlloc(0x1000, 0, 1, s, 100, 1, 8);
  t.RecordFree(0x1000, 0, 2);
  CHECK(Totals(t, s).self_allocated == 100 && Totals(t, s).self_freed == 100);
  CHECK(Totals(t, s).alloc_count == 1 && Totals(t, s).free_count == 1);
  CHECK(t.live_bytes() == 0);
}

void TestUnknownAndOlderFreesAreIgnored() {
  HeapTracker t;
  uint32_t s = 0;
  t.RecordFree(0x2000, 0, 1);  // never sampled
  t.RecordAlloc(0x1000, 0, 5, s, 64, 1, 8);
  t.RecordFree(0x1000, 0, 3);  // freed an older block at the same address
  CHECK(Totals(t, s).self_freed == 0 && t.live_bytes() == 64);
}

void TestReuseOfAnAddressCreditsTheOldBlock() {
  HeapTracker t;
  uint32_t a = 0, b = 1;
  t.RecordAlloc(0x1000, 0, 5, a, 10, 1, 8);
  t.RecordAlloc(0x1000, 0, 9, b, 20, 1, 8);  // the free of the first block never arrived
  CHECK(Totals(t, a).self_freed == 10 && Totals(t, b).self_freed == 0);
  t.RecordAlloc(0x1000, 0, 7, a, 30, 1, 8);  // older than the live one: it is already gone
  CHECK(Totals(t, a).self_allocated == 40 && Totals(t, a).self_freed == 40);
  CHECK(t.live_bytes() == 20);
}

// A client's threads write to rings of their own, a block's free to its allocation's ring, and
// the rings are read in turns: the block at A freed in ring 1, then A handed out again and
// recorded in ring 2, may be read in any order of the rings. Each free finds its own block.
void TestBlocksAreKeptByRing() {
  uint32_t a = 0, b = 1;
  for (bool ring_2_first : {false, true}) {
    HeapTracker t;
    const auto ring_1 = [&] {
      t.RecordAlloc(0x1000, 1, 10, a, 100, 1, 8);
      t.RecordFree(0x1000, 1, 20);
    };
    const auto ring_2 = [&] { t.RecordAlloc(0x1000, 2, 5, b, 30, 1, 8); };
    if (ring_2_first) ring_2();
    ring_1();
    if (!ring_2_first) ring_2();
    CHECK(Totals(t, a).self_freed == 100 && Totals(t, b).self_freed == 0);
    CHECK(t.live_bytes() == 30);
    const std::vector<droidheap::LiveSample> live = t.LiveSamples();
    CHECK(live.size() == 1 && live[0].block.address == 0x1000 && live[0].callstack == b);
    t.RecordFree(0x1000, 2, 7);
    CHECK(t.live_bytes() == 0 && Totals(t, b).self_freed == 30);
  }
  // Both read before either free: two blocks at A for a while, each freed by its own record.
  HeapTracker t;
  t.RecordAlloc(0x1000, 1, 10, a, 100, 1, 8);
  t.RecordAlloc(0x1000, 2, 5, b, 30, 1, 8);
  CHECK(t.live_bytes() == 130);
  t.RecordFree(0x1000, 2, 6);
  CHECK(Totals(t, b).self_freed == 30 && Totals(t, a).self_freed == 0);
  t.RecordFree(0x1000, 1, 11);
  CHECK(t.live_bytes() == 0);
}

void TestCallstacksAreInterned() {
  CallstackTable t;
  std::vector<FrameInfo> frames = {{0, 1}, {1, 2}};
  CHECK(t.InternCallstack(frames) == t.InternCallstack(frames));
  CHECK(t.InternCallstack({{0, 1}}) != t.InternCallstack(frames));
  droidheap::MappingInfo m;
  m.path = "/lib/x.so";
  CHECK(t.InternMapping(m) == t.InternMapping(m));
}

void TestPeakKeepsWhatWasInUseWhenTheHeapWasLargest() {
  HeapTracker t;
  uint32_t a = 0, b = 1, c = 2;
  t.RecordAlloc(0x1000, 0, 1, a, 100, 1, 8);
  t.RecordAlloc(0x2000, 0, 2, b, 300, 3, 8);
  t.RecordAlloc(0x3000, 0, 3, a, 50, 1, 8);  // the peak: a 150 in 2, b 300 in 3
  t.RecordFree(0x2000, 0, 4);
  t.RecordFree(0x1000, 0, 5);
  t.RecordAlloc(0x4000, 0, 6, c, 200, 1, 8);  // 250 live: below the peak
  CHECK(t.peak_live_bytes() == 450 && t.live_bytes() == 250);
  CHECK(Totals(t, a).peak_bytes == 150 && Totals(t, a).peak_count == 2);
  CHECK(Totals(t, b).peak_bytes == 300 && Totals(t, b).peak_count == 3);
  CHECK(Totals(t, c).peak_bytes == 0 && Totals(t, c).peak_count == 0);
  t.RecordAlloc(0x5000, 0, 7, c, 300, 1, 8);  // 550: a new peak, where every stack stands now
  CHECK(Totals(t, a).peak_bytes == 50 && Totals(t, b).peak_bytes == 0);
  CHECK(Totals(t, c).peak_bytes == 500 && Totals(t, c).peak_count == 2);
}

// Heaps of one process share its call stack ids; each heap reports only the stacks it saw.
void TestHeapsBookApartOverSharedCallstacks() {
  HeapTracker malloc_heap, pool;
  malloc_heap.RecordAlloc(0x1000, 0, 1, 0, 100, 1, 8);
  pool.RecordAlloc(0x1000, 0, 2, 5000, 40, 1, 8);  // the same address, another heap
  pool.RecordFree(0x1000, 0, 3);
  CHECK(malloc_heap.live_bytes() == 100 && pool.live_bytes() == 0);
  CHECK(malloc_heap.Snapshot().size() == 1 && pool.Snapshot().size() == 1);
  CHECK(Totals(pool, 5000).self_allocated == 40 && Totals(pool, 5000).self_freed == 40);
  CHECK(Totals(malloc_heap, 0).self_freed == 0);
}

}  // namespace

int main() {
  TestFreeMatchesAlloc();
  TestUnknownAndOlderFreesAreIgnored();
  TestReuseOfAnAddressCreditsTheOldBlock();
  TestBlocksAreKeptByRing();
  TestCallstacksAreInterned();
  TestHeapsBookApartOverSharedCallstacks();
  TestPeakKeepsWhatWasInUseWhenTheHeapWasLargest();
  printf("heap_tracker_test: ok\n");
  return 0;
}

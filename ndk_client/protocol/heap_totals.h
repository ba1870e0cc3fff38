// Exact totals of a process's allocations and frees: every call, not only the sampled ones. The
// client counts them in a shared memory object the daemon created (a second fd beside the ring
// buffer's, protocol 4); the daemon adds them up at each dump.
//
// Each thread of the process counts in a slot of its own, one cache line, with plain stores: no
// locked instruction and no line shared between cores on the malloc path. A thread takes a free
// slot on its first counted call and gives it back when it ends, so slots serve thread after
// thread; the totals are cumulative, whichever thread added to them. When every slot is taken, a
// thread counts in slot 0, the one shared slot, with atomic additions. The custom heaps
// (include/droidheap/heaps.h) are counted the same way: each slot owns a row of counters, one per
// custom heap, after all the slots; the pages of a row are touched only once a thread of that slot
// counts a custom heap, and the slot says so, so the daemon reads no other row.
//
// Shared between a 32-bit client and a 64-bit daemon: fixed-width fields, one layout (see
// wire_protocol.h). The daemon treats it as hostile input: the sums are only numbers, whatever a
// peer writes into it.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "protocol/wire_protocol.h"

namespace droidheap {

// One heap's counts, as the threads of one slot made them.
struct HeapCounters {
  std::atomic<uint64_t> alloc_count;
  std::atomic<uint64_t> alloc_bytes;  // libc's heap: usable sizes; a custom heap: reported sizes
  std::atomic<uint64_t> free_count;
  std::atomic<uint64_t> free_bytes;
};
static_assert(sizeof(HeapCounters) == 32, "shared layout");

struct alignas(64) TotalsSlot {
  std::atomic<uint32_t> taken;  // 1 while a thread counts here; slot 0 is always shared
  std::atomic<uint32_t> counts_custom;  // 1 once this slot's row of custom heaps was counted in
  HeapCounters malloc;
};
static_assert(sizeof(TotalsSlot) == 64, "shared layout: one slot per cache line");

// The custom heaps' counts of one slot: heap n at heaps[n - 1].
struct alignas(64) CustomHeapRow {
  HeapCounters heaps[kMaxCustomHeaps];
};
static_assert(sizeof(CustomHeapRow) == 32 * kMaxCustomHeaps, "shared layout");

struct HeapTotals {
  uint64_t alloc_count = 0;
  uint64_t alloc_bytes = 0;
  uint64_t free_count = 0;
  uint64_t free_bytes = 0;
};

// One mapping of the totals, in either process. Owned like SharedRingBuffer: by the daemon's
// per-client state, or by the client (never unmapped there: threads may still be counting).
class SharedTotals {
 public:
  static constexpr uint32_t kSlots = 1024;
  static constexpr uint64_t kSize = uint64_t{kSlots} * (sizeof(TotalsSlot) + sizeof(CustomHeapRow));

  // Daemon side: a new sealed memfd, zeroed.
  static SharedTotals* Create();
  // Client side: maps an object received from the daemon after checking its size and seals.
  // nullptr on error; the caller keeps the fd then.
  static SharedTotals* Attach(int fd, uint64_t size);
  static void Destroy(SharedTotals* totals);
  struct Deleter {
    void operator()(SharedTotals* totals) const { Destroy(totals); }
  };
  SharedTotals(const SharedTotals&) = delete;
  SharedTotals& operator=(const SharedTotals&) = delete;

  int fd() const { return fd_; }

  // Client side, any thread: a slot of the caller's own, or the shared slot when none is free.
  // Does not allocate.
  TotalsSlot* Claim();
  TotalsSlot* shared_slot() const { return slots_; }
  bool IsShared(const TotalsSlot* slot) const { return slot == slots_; }
  // By the thread that claimed `slot`, when it ends.
  void Release(TotalsSlot* slot);

  // `slot`'s row of custom heaps' counters. A thread says so before it first counts in a row.
  CustomHeapRow* custom_row(const TotalsSlot* slot) const { return &rows()[slot - slots_]; }
  static void MarkCountsCustom(TotalsSlot* slot) {
    slot->counts_custom.store(1, std::memory_order_relaxed);
  }

  // Daemon side: the totals of libc's heap, the sum over its slots as the client's threads last
  // stored them.
  HeapTotals Sum() const;
  // Daemon side: the totals of custom heap `heap` (1 to kMaxCustomHeaps), over the rows counted in.
  HeapTotals SumOfCustomHeap(uint32_t heap) const;

 private:
  SharedTotals(int fd, TotalsSlot* slots) : fd_(fd), slots_(slots) {}
  CustomHeapRow* rows() const { return reinterpret_cast<CustomHeapRow*>(slots_ + kSlots); }
  static SharedTotals* Map(int fd);

  int fd_;
  TotalsSlot* slots_;
};

// Adds to a counter of a slot. A slot of the thread's own has one writer: a plain load and store,
// which the daemon's relaxed loads read whole. The shared slot needs the atomic addition.
inline void AddToSlot(std::atomic<uint64_t>* counter, uint64_t value, bool shared) {
  if (shared) {
    counter->fetch_add(value, std::memory_order_relaxed);
  } else {
    counter->store(counter->load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
  }
}

inline void CountAllocIn(HeapCounters* counters, uint64_t bytes, bool shared) {
  AddToSlot(&counters->alloc_count, 1, shared);
  AddToSlot(&counters->alloc_bytes, bytes, shared);
}

inline void CountFreeIn(HeapCounters* counters, uint64_t bytes, bool shared) {
  AddToSlot(&counters->free_count, 1, shared);
  AddToSlot(&counters->free_bytes, bytes, shared);
}

}  // namespace droidheap

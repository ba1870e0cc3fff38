// Exact totals of a process's allocations and frees: every call, not only the sampled ones. The
// client counts them in a shared memory object the daemon created (a second fd beside the ring
// buffer's, protocol 4); the daemon adds them up at each dump.
//
// Each thread of the process counts in a slot of its own, one cache line, with plain stores: no
// locked instruction and no line shared between cores on the malloc path. A thread takes a free
// slot on its first counted call and gives it back when it ends, so slots serve thread after
// thread; the totals are cumulative, whichever thread added to them. When every slot is taken, a
// thread counts in slot 0, the one shared slot, with atomic additions.
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

struct alignas(64) TotalsSlot {
  std::atomic<uint32_t> taken;  // 1 while a thread counts here; slot 0 is always shared
  uint32_t reserved;
  std::atomic<uint64_t> alloc_count;
  std::atomic<uint64_t> alloc_bytes;  // usable sizes (malloc_usable_size)
  std::atomic<uint64_t> free_count;
  std::atomic<uint64_t> free_bytes;
};
static_assert(sizeof(TotalsSlot) == 64, "shared layout: one slot per cache line");

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
  static constexpr uint32_t kSlots = 1024;  // libc's heap
  static constexpr uint64_t kSize =
      uint64_t{kSlots + kMaxCustomHeaps} * sizeof(TotalsSlot);

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

  // The slot of custom heap `heap` (1 to kMaxCustomHeaps), counted in with atomic additions.
  TotalsSlot* custom_heap_slot(uint32_t heap) const { return slots_ + kSlots + (heap - 1); }

  // Daemon side: the totals of libc's heap, the sum over its slots as the client's threads last
  // stored them.
  HeapTotals Sum() const;
  // Daemon side: the totals of custom heap `heap` (1 to kMaxCustomHeaps).
  HeapTotals SumOfCustomHeap(uint32_t heap) const;

 private:
  SharedTotals(int fd, TotalsSlot* slots) : fd_(fd), slots_(slots) {}
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

inline void CountAllocIn(TotalsSlot* slot, uint64_t bytes, bool shared) {
  AddToSlot(&slot->alloc_count, 1, shared);
  AddToSlot(&slot->alloc_bytes, bytes, shared);
}

inline void CountFreeIn(TotalsSlot* slot, uint64_t bytes, bool shared) {
  AddToSlot(&slot->free_count, 1, shared);
  AddToSlot(&slot->free_bytes, bytes, shared);
}

}  // namespace droidheap

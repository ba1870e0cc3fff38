// Bookkeeping of one heap of one profiled process: allocations and frees per call stack (by their
// ids in the process's CallstackTable), and the live allocations by address. Owned by the
// unwinding worker that owns the client; not thread-safe.
//
// Records arrive in ring-buffer order, which can differ from the order the program ran them in.
// A client of protocol 13 writes to several rings (ring_set.h), a block's allocation and free to
// the same one, and the rings are read in turns: so a block is kept by its address and its ring
// (a new block at an address may be read, from another ring, before the old one's free), and
// its free looked up there. Within a ring, sequence numbers (taken by the client after a malloc
// returned and before a free started) settle every conflict at an address:
//
//   live[A] = {seq 5, stack S}     alloc A seq 9  -> S is credited a free (the block at A was
//                                                   freed and reused; that free never reached us
//                                                   or was ordered after), live[A] = seq 9
//                                  free A seq 3   -> ignored: it freed an older block at A
//                                  free A seq 7   -> S credited the free, live[A] erased
//   (nothing at A)                 free A         -> ignored: an allocation never sampled
//
// It also keeps, per call stack, the bytes and blocks in use at the moment the sampled heap was
// largest (heapprofd's dump_at_max), lazily: a call stack that has not changed since
// that moment still holds its value of then, so only a call stack's first change after a new peak
// copies its value aside.
#pragma once

#include <stdint.h>

#include <vector>

#include "daemon/dump_snapshot.h"
#include "daemon/live_allocations.h"
#include "reachability/heap_sweep.h"

namespace droidheap {

// A live sampled block as a sweep for unreachable memory judges it (unreachable_scan.h): where it
// lies, and what it stands for.
struct LiveSample {
  HeapBlock block;  // at its address, the size the program asked for
  uint32_t callstack = 0;
  uint64_t bytes = 0;  // scaled, as the heap's samples are
  uint64_t count = 0;
};

class HeapTracker {
 public:
  // `block_size`: the bytes the program asked for.
  void RecordAlloc(uint64_t address, uint32_t ring, uint64_t sequence, uint32_t callstack,
                   uint64_t sample_size, uint64_t count, uint64_t block_size);
  void RecordFree(uint64_t address, uint32_t ring, uint64_t sequence);

  // The totals of every call stack this heap has seen an allocation from (cumulative, as
  // heapprofd's are).
  std::vector<CallstackSample> Snapshot() const;

  // The live blocks: a copy a sweep may take away (to another thread).
  std::vector<LiveSample> LiveSamples() const;

  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t peak_live_bytes() const { return peak_live_bytes_; }
  // What its tables take (for the session's memory cap).
  size_t memory_bytes() const {
    return slots_.capacity() * sizeof(uint32_t) + totals_.capacity() * sizeof(CallstackSample) +
           at_peak_.capacity() * sizeof(AtPeak) + live_.memory_bytes();
  }

 private:
  // Where `callstack`'s totals are kept in totals_ and at_peak_, made on its first allocation.
  uint32_t SlotOf(uint32_t callstack);
  void CreditFree(const LiveAllocation& live);
  // Before the totals of the call stack at `slot` change: keeps their value at the peak when this
  // is their first change since then.
  void BeforeChange(uint32_t slot);
  // After the live bytes grew: a new peak is now.
  void AfterGrowth();

  struct AtPeak {
    uint64_t bytes = 0;
    uint64_t count = 0;
    uint64_t changed_at = 0;  // change_ when the call stack last changed
  };

  // By callstack id: 1 + the slot of its totals; 0 = never seen in this heap. A process's call
  // stacks are shared by its heaps, so a heap sees only some: 4 bytes each for the others.
  std::vector<uint32_t> slots_;
  std::vector<CallstackSample> totals_;  // by slot
  std::vector<AtPeak> at_peak_;          // by slot
  LiveAllocations live_;  // LiveAllocation::callstack holds the slot
  uint64_t live_bytes_ = 0;
  uint64_t peak_live_bytes_ = 0;
  uint64_t change_ = 0;   // counts changes of any call stack's totals
  uint64_t peak_at_ = 0;  // change_ when the latest peak was reached; 0 = none yet
};

}  // namespace droidheap

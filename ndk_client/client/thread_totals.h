// One thread's part in the exact totals of the current session (protocol/heap_totals.h): the slot
// it counts its allocations and frees in, libc's and the custom heaps'. Thread-local, never shared;
// a zero-initialised one counts nowhere until its first Refresh.
//
// The slot is looked up again whenever the recording generation (Client::generation()) changes,
// that is when a session starts or stops: one load and compare per call otherwise. A thread gives
// its slot back when it ends (a pthread key's destructor) and then counts in the shared slot, for
// the frees that other destructors still make.
#pragma once

#include <stdint.h>

#include "client/process_identity.h"
#include "protocol/heap_totals.h"

namespace droidheap {

class ThreadTotals {
 public:
  uint32_t generation() const { return generation_; }
  // Where libc's calls are counted; nullptr when the session does not count them, and in a child
  // that inherited the slot without an atfork handler (a raw clone()): its calls are not the
  // profiled process's. Checked where the check costs no system call.
  HeapCounters* malloc_counters() const {
    return InOwnProcess() && !profiler_allocating_ ? malloc_counters_ : nullptr;
  }
  // While the profiler itself allocates on this thread (pthread_getattr_np, from a hook): those
  // calls are not the program's, and are not counted.
  void set_profiler_allocating(bool allocating) { profiler_allocating_ = allocating; }
  // Where custom heap `heap` (1 to kMaxCustomHeaps) is counted; nullptr when nowhere.
  HeapCounters* custom_counters(uint32_t heap) {
    if (__builtin_expect(custom_row_ == nullptr, 0)) return FirstCustomCounters(heap);
    return InOwnProcess() ? &custom_row_->heaps[heap - 1] : nullptr;
  }

  // Counts in `totals` (nullptr: nowhere) of the process `identity` names from now on, as of
  // `generation`, libc's calls only when `counts_malloc`. Gives back the slot held so far. Safe to
  // re-enter from an allocation it makes: the generation is set first.
  void Refresh(uint32_t generation, SharedTotals* totals, const ProcessIdentity* identity,
               bool counts_malloc);
  // The thread ends: its slot goes back, and it counts in the shared slot from now on.
  void EndThread();
  // In a forked child: the slot is the parent thread's (the mapping is shared); forget it without
  // giving it back.
  void ForgetInChild();

  void CountAlloc(HeapCounters* counters, uint64_t bytes) const {
    CountAllocIn(counters, bytes, shared_);
  }
  void CountFree(HeapCounters* counters, uint64_t bytes) const {
    CountFreeIn(counters, bytes, shared_);
  }

  // Once per process, before any Refresh: the key whose destructor calls EndThread.
  static bool CreateThreadKey();

 private:
  bool InOwnProcess() const { return identity_ == nullptr || identity_->InOriginalProcess(); }
  // Out of line: once per thread and session, the row found and marked as counted in.
  HeapCounters* FirstCustomCounters(uint32_t heap);

  uint32_t generation_ = 0;
  bool shared_ = false;
  bool profiler_allocating_ = false;
  CustomHeapRow* custom_row_ = nullptr;  // slot_'s, once marked (SharedTotals::MarkCountsCustom)
  HeapCounters* malloc_counters_ = nullptr;  // in slot_, or nullptr
  TotalsSlot* slot_ = nullptr;
  SharedTotals* totals_ = nullptr;  // where slot_ belongs
  const ProcessIdentity* identity_ = nullptr;
};

// The calling thread's totals (heapprofd_entry_points.cc holds them).
ThreadTotals& ThisThreadTotals();

}  // namespace droidheap

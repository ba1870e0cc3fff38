// One thread's part in the exact totals of the current session (protocol/heap_totals.h): the slot
// it counts its allocations and frees in, libc's and the custom heaps'. Thread-local, never shared;
// a zero-initialised one counts nowhere until its first Refresh.
//
// The hooks call Refresh whenever the recording generation (Client::generation()) changes, that
// is when a session starts or stops. A thread gives its slot back when it ends (a pthread key's
// destructor) and then counts in the shared slot, for the frees that other destructors still make.
#pragma once

#include <stdint.h>

#include "client/process_identity.h"
#include "protocol/heap_totals.h"

namespace droidheap {

class ThreadTotals {
 public:
  // Where libc's calls are counted; nullptr when the session does not count them, and while the
  // profiler allocates. A child that inherited the slot without our atfork handler (a raw clone(),
  // or the atfork handlers that run before ours) is kept out by the generation it reads (see
  // Client::generation()); where that cannot be, by bionic's cached pid (check_pid_), and on
  // glibc not at all: its getpid() is a system call.
  HeapCounters* malloc_counters() const {
    HeapCounters* counters = counted_malloc_;
    return counters != nullptr && CountsHere() ? counters : nullptr;
  }
  // The hooks' first ask, with nothing else to check: this thread's own slot when libc's calls
  // are counted there with plain adds (CountAllocIn, not shared); else nullptr, and when
  // malloc_counters() may be somewhere (the shared slot, or the cached pid to ask),
  // counts_malloc_elsewhere() says so.
  HeapCounters* own_malloc_counters() const { return own_malloc_; }
  bool counts_malloc_elsewhere() const { return counted_malloc_ != nullptr; }
  // While the profiler itself allocates on this thread (pthread_getattr_np, from a hook): those
  // calls are not the program's, and are not counted.
  void set_profiler_allocating(bool allocating) {
    profiler_allocating_ = allocating;
    UpdateCountedMalloc();
  }
  // Where custom heap `heap` (1 to kMaxCustomHeaps) is counted; nullptr when nowhere.
  HeapCounters* custom_counters(uint32_t heap) {
    if (__builtin_expect(custom_row_ == nullptr, 0)) return FirstCustomCounters(heap);
    return CountsHere() ? &custom_row_->heaps[heap - 1] : nullptr;
  }

  // Counts in `totals` (nullptr: nowhere) of the process `identity` names from now on, libc's
  // calls only when `counts_malloc`, each call checking bionic's cached pid when `check_pid`.
  // Gives back the slot held so far. Re-entered from an allocation it makes, it is not called
  // again (the caller notes the generation first).
  void Refresh(SharedTotals* totals, const ProcessIdentity* identity, bool counts_malloc,
               bool check_pid);
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
  // On the hook path, once the slot is known: a test, and on bionic without a wiped generation
  // the cached pid (out of line: the hook path's registers stay free for the common case).
  bool CountsHere() const { return !kLibcCachesPid || !check_pid_ || InOwnProcessByPid(); }
  __attribute__((noinline)) bool InOwnProcessByPid() const;
  // Off the hook path: the identity's full answer where it needs no system call.
  bool InOwnProcess() const { return identity_ == nullptr || identity_->InOriginalProcess(); }
  void UpdateCountedMalloc() {
    counted_malloc_ = profiler_allocating_ ? nullptr : malloc_counters_;
    own_malloc_ = shared_ || check_pid_ ? nullptr : counted_malloc_;
  }
  // Out of line: once per thread and session, the row found and marked as counted in.
  HeapCounters* FirstCustomCounters(uint32_t heap);

  HeapCounters* own_malloc_ = nullptr;  // counted_malloc_ where nothing else needs checking
  HeapCounters* counted_malloc_ = nullptr;  // malloc_counters_ unless the profiler allocates
  bool check_pid_ = false;
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

// What every malloc hook runs before it knows whether the call concerns the profile: this thread's
// view of the session (one thread-local), its check against the recording generation, the sampler's
// and the table's answers, and the exact count of the call. Shared by the hooks programs call by
// the million (client/malloc_free_hooks.cc) and the rest of the entry points
// (client/heapprofd_entry_points.cc, which defines what is declared here).
//
// Hook path rules: no heap use of our own, no locks held across calls into the allocator, a
// thread-local guard against re-entry (pthread_getattr_np and friends allocate).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "client/client.h"
#include "client/sampled_addresses.h"
#include "client/sampler.h"
#include "client/thread_totals.h"
#include "common/malloc_dispatch.h"
#include "common/platform.h"

// Hidden, as everything of the client but its entry points: declared so, the hooks reach these
// directly, where a symbol that may live in another module goes through the GOT.
#pragma GCC visibility push(hidden)

namespace droidheap {

// The allocator the hooks call: the one bionic (or the emulation layer) had before ours.
extern const MallocDispatch* g_previous;
// The current client's table of sampled addresses, which every free reads; an empty one until the
// first session.
extern std::atomic<const SampledAddresses*> g_sampled;

// What a hook reads and writes of its own thread, in one thread-local: one address for all of it.
// Constant-initialised (no guard on the hook path): generation 0 is none, so the first call
// refreshes it.
struct HookThread {
  // While the profiler works on this thread (a sample's or a free's record), the allocations it
  // makes (pthread_getattr_np's, a signal handler's) are not sampled: they go to the sampled paths
  // (the sampler's count may cross its point meanwhile), which let them through, and the count
  // is then put back, so that they take no sample point from the program's allocations either.
  void EnterHook() {
    in_hook = true;
    held_countdown = sampler.countdown();
  }
  void LeaveHook() {
    sampler.set_countdown(held_countdown);
    in_hook = false;
  }

  uint32_t generation = 0;  // Client::generation() this view belongs to
  bool in_hook = false;
  Sampler sampler;
  Sampler custom_sampler;  // the custom heaps': libc's stream stays as it was
  ThreadTotals totals;
  int64_t held_countdown = 0;  // the sampler's, while in the hook
};
extern DROIDHEAP_TLS HookThread t_thread;

// Out of line: once per thread and generation. A sampler whose session ended starts afresh.
void Refresh(uint32_t generation);

// The address of this thread's HookThread, taken once by each hook. The empty asm makes it a
// value the compiler keeps: clang otherwise looks bionic's thread-locals up again (a TLSDESC call)
// at every access, five times in an unsampled malloc.
inline HookThread& ThisThread() {
  HookThread* self = &t_thread;
  asm("" : "+r"(self));
  return *self;
}

// This thread's view, as of the current session. Called first by the hooks of
// heapprofd_entry_points.cc (malloc, calloc and free refresh theirs by a tail call instead).
inline HookThread& CurrentThread() {
  HookThread& self = ThisThread();
  const uint32_t generation = Client::generation();
  if (__builtin_expect(generation != self.generation, 0)) Refresh(generation);
  return self;
}

// Out of line: calls counted in the shared slot, or where the cached pid must be asked
// (ThreadTotals::counts_malloc_elsewhere).
void CountAllocElsewhere(const ThreadTotals& totals, const void* ptr);
void CountFreeElsewhere(const ThreadTotals& totals, const void* ptr);

// Every block handed out and every block given back is counted at its usable size, what the
// allocator really set aside: the two sides then cancel exactly. Returns `ptr`.
// After the call (CurrentThread before it): a session that starts meanwhile counts from the next.
inline void* CountAlloc(const ThreadTotals& totals, void* ptr) {
  if (ptr == nullptr) return ptr;
  HeapCounters* own = totals.own_malloc_counters();
  if (__builtin_expect(own != nullptr, 1)) {
    CountAllocIn(own, g_previous->malloc_usable_size(ptr), /*shared=*/false);
  } else if (totals.counts_malloc_elsewhere()) {
    CountAllocElsewhere(totals, ptr);
  }
  return ptr;
}

// Before the block goes back to the allocator: its usable size is gone after.
inline void CountFree(const ThreadTotals& totals, void* ptr) {
  if (ptr == nullptr) return;
  HeapCounters* own = totals.own_malloc_counters();
  if (__builtin_expect(own != nullptr, 1)) {
    CountFreeIn(own, g_previous->malloc_usable_size(ptr), /*shared=*/false);
  } else if (totals.counts_malloc_elsewhere()) {
    CountFreeElsewhere(totals, ptr);
  }
}

// Whether the free of `ptr` may have to be reported: false, after one load of the table, for
// nearly every block (those never sampled).
inline bool MaybeSampledBlock(void* ptr) {
  return g_sampled.load(std::memory_order_acquire)->MayHold(reinterpret_cast<uint64_t>(ptr));
}

// The sampled paths of malloc, calloc and free: out of line, so that the hooks stay small (the
// count, the decision and the call), and reached by a tail call, so that no sampled stack holds
// a hook's frame.
void* MallocMaybeSampled(HookThread& self, size_t size);
void* CallocMaybeSampled(HookThread& self, size_t n, size_t size, size_t total);
void FreeMaybeSampled(void* ptr);

}  // namespace droidheap

#pragma GCC visibility pop

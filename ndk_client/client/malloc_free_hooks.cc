// The hooks programs call by the million: malloc, calloc and free (the other MallocDispatch slots
// are in client/heapprofd_entry_points.cc). Each checks this thread's view of the session, asks the
// sampler or the table of sampled addresses, counts the call and calls the previous allocator; the
// rare call that may concern the profile goes on, by a tail call, to its sampled path there.
//
// Built without frame pointers (CMakeLists.txt): the frame these functions keep while the
// allocator runs is then three saved registers, no frame record, 5 instructions fewer a call. No
// stack of a sample holds them (a sampled call leaves by its tail call first), and an unwind that
// meets one all the same, a signal handler's allocation while the allocator runs, reads this
// file's CFI as it does every frame of code built without frame pointers (the program's, libc's).
#include <stddef.h>

#include "client/hook_path.h"

using namespace droidheap;

#define EXPORT extern "C" __attribute__((visibility("default")))

// A thread whose view of the session is not current refreshes it and calls the hook again: a
// tail call out of the hook, so that no value of the hook lives across the refresh (which would
// cost every call a place kept on the stack).
namespace {
__attribute__((noinline)) void* MallocAfterRefresh(size_t size);
__attribute__((noinline)) void* CallocAfterRefresh(size_t n, size_t size);
__attribute__((noinline)) void FreeAfterRefresh(void* ptr);

inline bool IsCurrent(const HookThread& self) {
  return __builtin_expect(Client::generation() == self.generation, 1);
}
}  // namespace

EXPORT void* heapprofd_malloc(size_t size) {
  HookThread& self = ThisThread();
  if (!IsCurrent(self)) return MallocAfterRefresh(size);
  if (!self.sampler.MaybeSampled(size)) return CountAlloc(self.totals, g_previous->malloc(size));
  return MallocMaybeSampled(self, size);
}

EXPORT void* heapprofd_calloc(size_t n, size_t size) {
  HookThread& self = ThisThread();
  if (!IsCurrent(self)) return CallocAfterRefresh(n, size);
  size_t total;
  if (__builtin_mul_overflow(n, size, &total) || !self.sampler.MaybeSampled(total)) {
    return CountAlloc(self.totals, g_previous->calloc(n, size));
  }
  return CallocMaybeSampled(self, n, size, total);
}

EXPORT void heapprofd_free(void* ptr) {
  HookThread& self = ThisThread();
  if (!IsCurrent(self)) return FreeAfterRefresh(ptr);
  CountFree(self.totals, ptr);
  if (!MaybeSampledBlock(ptr)) return g_previous->free(ptr);
  FreeMaybeSampled(ptr);
}

namespace {
void* MallocAfterRefresh(size_t size) {
  Refresh(Client::generation());
  return heapprofd_malloc(size);
}
void* CallocAfterRefresh(size_t n, size_t size) {
  Refresh(Client::generation());
  return heapprofd_calloc(n, size);
}
void FreeAfterRefresh(void* ptr) {
  Refresh(Client::generation());
  heapprofd_free(ptr);
}
}  // namespace

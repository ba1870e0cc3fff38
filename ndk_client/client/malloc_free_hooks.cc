// The hooks programs call by the million: malloc, calloc and free (the other MallocDispatch slots
// are in client/heapprofd_entry_points.cc). Each checks this thread's view of the session, asks the
// sampler or the table of sampled addresses, counts the call and calls the previous allocator; the
// rare call that may concern the profile goes on, by a tail call, to its sampled path there.
//
// Built without frame pointers (CMakeLists.txt): the frame these functions keep while the
// allocator runs is then three saved registers, no frame record, 5 instructions fewer a call. No
// stack of a sample holds them (a sampled call leaves by its tail call first), and an unwind that
// meets one all the same, a signal handler's allocation while the allocator runs, reads this
// file's CFI as it does every frame of code built without frame pointers (the program's and libc's).
#include <stddef.h>

#include "client/hook_path.h"

using namespace droidheap;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void* heapprofd_malloc(size_t size) {
  HookThread& self = CurrentThread();
  if (!MaybeSampled(self, size)) return CountAlloc(self.totals, g_previous->malloc(size));
  return MallocMaybeSampled(self, size);
}

EXPORT void* heapprofd_calloc(size_t n, size_t size) {
  HookThread& self = CurrentThread();
  size_t total;
  if (__builtin_mul_overflow(n, size, &total) || !MaybeSampled(self, total)) {
    return CountAlloc(self.totals, g_previous->calloc(n, size));
  }
  return CallocMaybeSampled(self, n, size, total);
}

EXPORT void heapprofd_free(void* ptr) {
  CountFree(CurrentThread().totals, ptr);
  if (!MaybeSampledBlock(ptr)) return g_previous->free(ptr);
  FreeMaybeSampled(ptr);
}

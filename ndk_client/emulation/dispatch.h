// The emulation layer's allocator dispatch: what bionic's libc does for every malloc-family call.
// `CurrentDispatch()` is read on every allocation by any thread; it is swapped with a release store
// by the hook routes (hook_routes.cc), never freed.
#pragma once

#include <atomic>

#include "common/malloc_dispatch.h"

namespace droidheap {

// glibc's allocator, forwarded to through its exported __libc_* entry points.
extern const MallocDispatch kLibcDispatch;
extern std::atomic<const MallocDispatch*> g_dispatch;

inline const MallocDispatch* CurrentDispatch() {
  return g_dispatch.load(std::memory_order_acquire);
}

}  // namespace droidheap

// The allocator dispatch of an interposing library (the emulation layer on Linux, the preload
// library on a phone): every exported malloc-family entry point goes through `CurrentDispatch()`,
// exactly as bionic's do. The table is swapped with a release store by the client loader
// (client_loader.cc), never freed.
//
// The real allocator is the next library's malloc family in the search order, found with
// dlsym(RTLD_NEXT) (interposer/next_dispatch.cc): bionic's on a phone, glibc's on Linux, or an
// allocator the user preloaded after droidheap's library (jemalloc, tcmalloc), whose blocks then
// never meet another allocator's functions.
#pragma once

#include <atomic>

#include "common/malloc_dispatch.h"

namespace droidheap {

// The table in force: the real allocator's until a client is loaded, then the client's.
extern std::atomic<const MallocDispatch*> g_dispatch;

inline const MallocDispatch* CurrentDispatch() {
  return g_dispatch.load(std::memory_order_acquire);
}

// The real allocator's table, handed to the client as the one it forwards to.
const MallocDispatch* RealDispatch();

}  // namespace droidheap

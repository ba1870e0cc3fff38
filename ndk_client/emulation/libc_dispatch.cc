// The emulation layer's real allocator: glibc's, through its exported __libc_* entry points (which
// no interposer can shadow). The table is constant-initialised: ld.so and other libraries'
// constructors allocate before ours run.
#include <errno.h>
#include <malloc.h>
#include <stdint.h>

#include "interposer/dispatch.h"

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
// glibc's malloc_usable_size under the table's type (bionic's takes a const pointer): the same
// symbol, which every counted allocation and free calls, so no wrapper of ours sits in between.
size_t GlibcMallocUsableSize(const void* ptr) __asm__("malloc_usable_size");
}

namespace droidheap {
namespace {

bool IsValidPosixAlignment(size_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment % sizeof(void*) == 0;
}

int LibcPosixMemalign(void** out, size_t alignment, size_t size) {
  if (!IsValidPosixAlignment(alignment)) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

void* LibcAlignedAlloc(size_t alignment, size_t size) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  return __libc_memalign(alignment, size);
}

// glibc has no heap walk or allocator freeze; bionic's callers treat these as unsupported.
int LibcMallocIterate(uintptr_t, size_t, void (*)(uintptr_t, size_t, void*), void*) {
  errno = ENOTSUP;
  return -1;
}
void LibcMallocDisable() {}
void LibcMallocEnable() {}

#if defined(DROIDHEAP_MALLINFO2)
droidheap_mallinfo LibcMallinfo() { return ::mallinfo2(); }
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
droidheap_mallinfo LibcMallinfo() { return ::mallinfo(); }
#pragma GCC diagnostic pop
#endif

const MallocDispatch kLibcDispatch = {
    __libc_calloc,     __libc_free,       LibcMallinfo,      __libc_malloc, GlibcMallocUsableSize,
    __libc_memalign,   LibcPosixMemalign,
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
    __libc_pvalloc,
#endif
    __libc_realloc,
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
    __libc_valloc,
#endif
    LibcMallocIterate,
    LibcMallocDisable, LibcMallocEnable,  ::mallopt,         LibcAlignedAlloc, ::malloc_info,
};

}  // namespace

std::atomic<const MallocDispatch*> g_dispatch{&kLibcDispatch};

const MallocDispatch* RealDispatch() { return &kLibcDispatch; }

}  // namespace droidheap

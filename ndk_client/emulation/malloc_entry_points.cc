// The malloc family as a program on the emulated device sees it: each entry point goes through the
// current dispatch table, exactly as bionic's do. glibc-only entry points (valloc, pvalloc,
// reallocarray, cfree-style aliases) map onto the table's slots; informational ones (mallinfo,
// mallopt, malloc_info, malloc_trim, malloc_stats) are not interposed and stay glibc's own.
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "emulation/dispatch.h"

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
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

// glibc's takes a non-const pointer; bionic's (and the table's) a const one.
size_t LibcMallocUsableSize(const void* ptr) { return ::malloc_usable_size(const_cast<void*>(ptr)); }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
droidheap_mallinfo LibcMallinfo() { return ::mallinfo(); }
#pragma GCC diagnostic pop

}  // namespace

// Constant-initialised: ld.so and other libraries' constructors allocate before ours run.
const MallocDispatch kLibcDispatch = {
    __libc_calloc,     __libc_free,       LibcMallinfo,      __libc_malloc, LibcMallocUsableSize,
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

std::atomic<const MallocDispatch*> g_dispatch{&kLibcDispatch};

}  // namespace droidheap

using droidheap::CurrentDispatch;

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t size) {
  return CurrentDispatch()->malloc(size);
}

__attribute__((visibility("default"))) void free(void* ptr) { CurrentDispatch()->free(ptr); }

__attribute__((visibility("default"))) void* calloc(size_t n, size_t size) {
  return CurrentDispatch()->calloc(n, size);
}

__attribute__((visibility("default"))) void* realloc(void* ptr, size_t size) {
  return CurrentDispatch()->realloc(ptr, size);
}

__attribute__((visibility("default"))) void* reallocarray(void* ptr, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return CurrentDispatch()->realloc(ptr, total);
}

__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  return CurrentDispatch()->memalign(alignment, size);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment,
                                                          size_t size) {
  return CurrentDispatch()->posix_memalign(out, alignment, size);
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
  return CurrentDispatch()->aligned_alloc(alignment, size);
}

// 32-bit bionic has slots for these two; 64-bit bionic does not have the functions at all, and
// here they become memalign calls.
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
__attribute__((visibility("default"))) void* valloc(size_t size) {
  return CurrentDispatch()->valloc(size);
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
  return CurrentDispatch()->pvalloc(size);
}
#else
__attribute__((visibility("default"))) void* valloc(size_t size) {
  return CurrentDispatch()->memalign(static_cast<size_t>(getpagesize()), size);
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
  size_t page = static_cast<size_t>(getpagesize());
  size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  return CurrentDispatch()->memalign(page, rounded & ~(page - 1));
}
#endif

}  // extern "C"

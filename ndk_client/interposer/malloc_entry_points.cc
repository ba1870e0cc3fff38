// The malloc family as an interposing library exports it (the emulation layer, the preload
// library): each entry point goes through the current dispatch table, exactly as bionic's do.
// glibc-only entry points (valloc, pvalloc, reallocarray) map onto the table's slots;
// informational ones (mallinfo, mallopt, malloc_info, malloc_usable_size, malloc_trim) are not
// interposed and stay the real libc's own.
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "interposer/dispatch.h"

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

// A malloc family of its own, built as a shared library and preloaded after droidheap's emulated
// libc (tests/e2e/test_profile.py), as a user preloads jemalloc or tcmalloc. Each block carries a
// header no other allocator can read, checked at every free, realloc and malloc_usable_size: a
// block of glibc's reaching these functions, or one of these reaching glibc's, ends the program.
// Blocks are never reused (a bump pointer over mmap'd chunks), so every header stays readable. Its
// entry points call each other through static functions, as real allocators do: an exported one
// would be droidheap's, first in the search order, and count a block twice.
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum { kHeader = 16, kChunk = 64 << 20 };
static const uint64_t kLive = 0x6f776e2d6c697665ull;  // "own-live"
static const uint64_t kFreed = 0x6f776e2d66726565ull;  // "own-free"

struct header {
  uint64_t magic;
  uint64_t size;
};

static char* chunk_start;
static size_t chunk_used = kChunk;
static atomic_flag lock = ATOMIC_FLAG_INIT;
static atomic_ulong served;

static void die(const char* what) {
  (void)!write(2, what, strlen(what));
  abort();
}

// `size` bytes after a header, the block at a multiple of `alignment` (a power of two >= 16).
static void* take(size_t size, size_t alignment) {
  if (size > kChunk / 2 || alignment > kChunk / 4) {
    errno = ENOMEM;
    return NULL;
  }
  while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {
  }
  size_t at = (chunk_used + kHeader + alignment - 1) & ~(alignment - 1);
  if (at + size > kChunk) {
    void* chunk = mmap(NULL, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (chunk == MAP_FAILED) die("own_allocator: out of memory\n");
    chunk_start = chunk;
    at = (kHeader + alignment - 1) & ~(alignment - 1);
  }
  chunk_used = at + size;
  char* block = chunk_start + at;
  atomic_flag_clear_explicit(&lock, memory_order_release);
  struct header* h = (struct header*)(block - kHeader);
  h->magic = kLive;
  h->size = size;
  atomic_fetch_add_explicit(&served, 1, memory_order_relaxed);
  return block;
}

static struct header* live_header(const void* p, const char* caller) {
  struct header* h = (struct header*)((char*)p - kHeader);
  if (h->magic != kLive) die(caller);
  return h;
}

EXPORT void* malloc(size_t size) { return take(size, 16); }

EXPORT void free(void* p) {
  if (p != NULL) live_header(p, "own_allocator: free of a block not its own\n")->magic = kFreed;
}

EXPORT void* calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return take(total, 16);  // fresh mmap'd memory, never reused: zero
}

EXPORT void* realloc(void* p, size_t size) {
  if (p == NULL) return take(size, 16);
  struct header* h = live_header(p, "own_allocator: realloc of a block not its own\n");
  void* moved = take(size, 16);
  if (moved == NULL) return NULL;
  memcpy(moved, p, h->size < size ? h->size : size);
  h->magic = kFreed;
  return moved;
}

EXPORT size_t malloc_usable_size(void* p) {
  if (p == NULL) return 0;
  return live_header(p, "own_allocator: usable size of a block not its own\n")->size;
}

static void* take_aligned(size_t alignment, size_t size) {
  return take(size, alignment < 16 ? 16 : alignment);
}

EXPORT void* memalign(size_t alignment, size_t size) { return take_aligned(alignment, size); }
EXPORT void* aligned_alloc(size_t alignment, size_t size) { return take_aligned(alignment, size); }
EXPORT int posix_memalign(void** out, size_t alignment, size_t size) {
  void* p = take_aligned(alignment, size);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
EXPORT void* valloc(size_t size) { return take_aligned((size_t)getpagesize(), size); }
EXPORT void* pvalloc(size_t size) { return take_aligned((size_t)getpagesize(), size); }

__attribute__((destructor)) static void say_served(void) {
  char line[64];
  int n = snprintf(line, sizeof(line), "own_allocator served %lu\n", atomic_load(&served));
  (void)!write(2, line, (size_t)n);
}

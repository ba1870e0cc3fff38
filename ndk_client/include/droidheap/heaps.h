/* droidheap/heaps.h: report the blocks of an allocator of your own to droidheap, as a heap of its
 * own beside libc's ("libc.malloc"), in the spirit of heapprofd's AHeapProfile_* API.
 *
 * Header only: C or C++ with the POSIX and Linux declarations (gcc's and clang's default; with
 * -std=c99, define _GNU_SOURCE), nothing to link. A program includes it whether or not a profiler
 * ever attaches; without one, a report costs one load and one branch.
 *
 *   static droidheap_heap* pool_heap;                 // once, from any thread, at any time
 *   pool_heap = droidheap_register_heap("pool");
 *
 *   void* p = pool_alloc(pool, n);
 *   droidheap_report_alloc(pool_heap, p, n);          // after the block is handed out
 *   ...
 *   droidheap_report_free(pool_heap, p, n);           // before it goes back
 *   pool_free(pool, p);
 *
 * Then `droidheap --heaps pool ...` (or --all-heaps) samples the heap's blocks with their call
 * stacks and counts all of them exactly; each heap of each dump gets a pprof of its own. A heap is
 * found whether it was registered before the profiler attached or after.
 *
 * How the two sides meet, without a symbol either could look up (on Android the profiler's
 * library and an app's live in linker namespaces of their own): the heaps live in a page named
 * "droidheap-heaps" in /proc/self/maps, and a profiler that is loaded names a page of its own
 * "droidheap-client". Each side, on arriving, creates its page and then looks for the other's, so
 * at least one of them finds the other; the profiler takes it from there (its `attach`).
 *
 * Everything below the API is shared with the profiler and keeps its layout; DROIDHEAP_HEAPS_
 * VERSION changes when it must not be read as before. */
#ifndef DROIDHEAP_HEAPS_H_
#define DROIDHEAP_HEAPS_H_

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct droidheap_heap droidheap_heap;

/* Every file that includes this has its own copy: no warning for the parts it does not call. */
#define DROIDHEAP_HEAPS_STATIC static __attribute__((unused))

/* Registers a heap by name (at most 63 bytes are kept; "libc.malloc" is libc's own). Returns the
 * handle to report its blocks with; never NULL (a heap that cannot be registered -- more than 31
 * in one file -- is reported nowhere). Thread-safe. */
DROIDHEAP_HEAPS_STATIC droidheap_heap* droidheap_register_heap(const char* name);

/* A block of `size` bytes at `address` was handed out by the heap. */
static inline void droidheap_report_alloc(droidheap_heap* heap, const void* address, size_t size);

/* The block at `address` goes back to the heap: call it before the heap may hand the address out
 * again. `size` is the size reported at its allocation (it makes the exact freed bytes exact). */
static inline void droidheap_report_free(droidheap_heap* heap, const void* address, size_t size);

/* ---- shared with the profiler ------------------------------------------------------------- */

#define DROIDHEAP_HEAPS_VERSION 1
#define DROIDHEAP_HEAP_NAME_SIZE 64
#define DROIDHEAP_REGISTRY_HEAPS 31
#define DROIDHEAP_REGISTRY_PAGE "droidheap-heaps"
#define DROIDHEAP_CLIENT_PAGE "droidheap-client"
#define DROIDHEAP_REGISTRY_MAGIC 0x50414548u /* "HEAP" */
#define DROIDHEAP_CLIENT_MAGIC 0x4e45494cu   /* "LIEN" */

enum { DROIDHEAP_EVENT_ALLOC = 1, DROIDHEAP_EVENT_FREE = 2 };

/* The 64-bit fields read and written atomically, 8-aligned on every ABI (each is at a multiple of
 * 8 already: the layout is the same). i386 aligns a uint64_t field to 4, and clang makes an atomic
 * access to a less aligned field a libatomic call -- a lock, which the program's copy and the
 * client's would not share -- rather than one instruction. */
#define DROIDHEAP_ATOMIC64 __attribute__((aligned(8)))

/* The profiler's entry for a report of an enabled heap. */
typedef void (*droidheap_report_fn)(droidheap_heap* heap, uint32_t event, uint64_t address,
                                    uint64_t size);

/* One heap: 128 bytes. The program writes `name` and then `ready`, once; the rest is the
 * profiler's, which stores `report` before it sets `enabled`. */
struct droidheap_heap {
  uint32_t enabled; /* nonzero while a profiler records this heap */
  uint32_t ready;   /* 1 once `name` is written */
  uint64_t report DROIDHEAP_ATOMIC64; /* a droidheap_report_fn */
  uint32_t number;   /* the profiler's number for the heap; 0 until it has seen it */
  uint32_t reserved1;
  uint64_t reserved2;
  char name[DROIDHEAP_HEAP_NAME_SIZE];
  uint8_t padding[32];
};

/* The heaps one copy of this header registered: one page. */
typedef struct droidheap_registry {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  uint32_t heap_count; /* slots handed out; may pass DROIDHEAP_REGISTRY_HEAPS when full */
  uint64_t attach DROIDHEAP_ATOMIC64; /* the profiler's droidheap_attach_fn, once one knows it */
  uint64_t reserved[5];
  struct droidheap_heap heaps[DROIDHEAP_REGISTRY_HEAPS];
} droidheap_registry;

/* The profiler's entry for a registry that has a new heap, or that it has not seen. */
typedef void (*droidheap_attach_fn)(droidheap_registry* registry);

/* The page a loaded profiler names DROIDHEAP_CLIENT_PAGE. */
typedef struct droidheap_client_page {
  uint32_t magic;
  uint32_t version;
  uint64_t attach DROIDHEAP_ATOMIC64; /* a droidheap_attach_fn */
} droidheap_client_page;

#define DROIDHEAP_PAGE_SIZE 4096

/* A zeroed private page that /proc/self/maps shows under `name` ("/memfd:NAME (deleted)", or
 * "[anon:NAME]" where memfd_create is missing); NULL when no page can be had. */
DROIDHEAP_HEAPS_STATIC void* droidheap_named_page(const char* name) {
  void* page = MAP_FAILED;
#ifdef SYS_memfd_create
  int fd = (int)syscall(SYS_memfd_create, name, 1u /* MFD_CLOEXEC */);
  if (fd >= 0) {
    if (ftruncate(fd, DROIDHEAP_PAGE_SIZE) == 0) {
      page = mmap(NULL, DROIDHEAP_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    }
    close(fd);
  }
#endif
  if (page == MAP_FAILED) {
    page = mmap(NULL, DROIDHEAP_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                -1, 0);
    if (page == MAP_FAILED) return NULL;
    /* PR_SET_VMA, PR_SET_VMA_ANON_NAME: Linux 5.17, and Android's kernels long before. */
    syscall(SYS_prctl, 0x53564d41, 0, (unsigned long)page, DROIDHEAP_PAGE_SIZE,
            (unsigned long)name);
  }
  return page;
}

/* Whether the path column of a maps line names a page of `name`. */
DROIDHEAP_HEAPS_STATIC int droidheap_path_names(const char* path, size_t length, const char* name) {
  size_t n = strlen(name);
  if (length >= 7 + n && memcmp(path, "/memfd:", 7) == 0 && memcmp(path + 7, name, n) == 0) {
    return length == 7 + n || path[7 + n] == ' ';
  }
  return length == 7 + n && memcmp(path, "[anon:", 6) == 0 && memcmp(path + 6, name, n) == 0 &&
         path[6 + n] == ']';
}

/* Calls found(page, context) for each page of /proc/self/maps named `name`, as
 * droidheap_named_page names them, until it returns nonzero. Reads the file without allocating. */
DROIDHEAP_HEAPS_STATIC void droidheap_find_pages(const char* name,
                                                 int (*found)(void* page, void* context),
                                                 void* context) {
  char buffer[4096];
  size_t held = 0;
  int eof = 0;
  int in_long_line = 0; /* the rest of a line longer than the buffer: skipped */
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  while (!eof || held > 0) {
    if (!eof && held < sizeof(buffer)) {
      ssize_t n = read(fd, buffer + held, sizeof(buffer) - held);
      if (n <= 0) eof = 1;
      else held += (size_t)n;
    }
    char* end = (char*)memchr(buffer, '\n', held);
    size_t line = end != NULL ? (size_t)(end - buffer) : held;
    if (end == NULL && !eof && held < sizeof(buffer)) continue;
    size_t consumed = end != NULL ? line + 1 : held;
    if (in_long_line || end == NULL) {
      in_long_line = end == NULL;
      memmove(buffer, buffer + consumed, held - consumed);
      held -= consumed;
      continue;
    }
    /* "start-end perms offset dev inode   path": the path starts after the fifth field. */
    size_t i = 0;
    for (int field = 0; field < 5; ++field) {
      while (i < line && buffer[i] != ' ') ++i;
      while (i < line && buffer[i] == ' ') ++i;
    }
    if (i < line && droidheap_path_names(buffer + i, line - i, name)) {
      uintptr_t start = 0;
      for (size_t j = 0; j < line && buffer[j] != '-'; ++j) {
        char c = buffer[j];
        start = start * 16 + (uintptr_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
      }
      if (found((void*)start, context)) break;
    }
    memmove(buffer, buffer + consumed, held - consumed);
    held -= consumed;
  }
  close(fd);
}

DROIDHEAP_HEAPS_STATIC int droidheap_take_client_page(void* page, void* registry) {
  const droidheap_client_page* client = (const droidheap_client_page*)page;
  if (client->magic != DROIDHEAP_CLIENT_MAGIC || client->version != DROIDHEAP_HEAPS_VERSION) {
    return 0;
  }
  __atomic_store_n(&((droidheap_registry*)registry)->attach, client->attach, __ATOMIC_SEQ_CST);
  return 1;
}

/* This file's registry, made on the first registration. */
DROIDHEAP_HEAPS_STATIC droidheap_registry* droidheap_this_registry;
DROIDHEAP_HEAPS_STATIC struct droidheap_heap droidheap_nowhere;

DROIDHEAP_HEAPS_STATIC droidheap_registry* droidheap_get_registry(void) {
  droidheap_registry* registry = __atomic_load_n(&droidheap_this_registry, __ATOMIC_ACQUIRE);
  if (registry != NULL) return registry;
  droidheap_registry* made = (droidheap_registry*)droidheap_named_page(DROIDHEAP_REGISTRY_PAGE);
  if (made == NULL) return NULL;
  made->version = DROIDHEAP_HEAPS_VERSION;
  made->size = sizeof(droidheap_registry);
  __atomic_store_n(&made->magic, DROIDHEAP_REGISTRY_MAGIC, __ATOMIC_SEQ_CST);
  if (!__atomic_compare_exchange_n(&droidheap_this_registry, &registry, made, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    munmap(made, DROIDHEAP_PAGE_SIZE);  /* another thread's came first */
    return registry;
  }
  /* Only now, with the page in the maps: a profiler that arrives later finds it there. */
  droidheap_find_pages(DROIDHEAP_CLIENT_PAGE, droidheap_take_client_page, made);
  return made;
}

DROIDHEAP_HEAPS_STATIC droidheap_heap* droidheap_register_heap(const char* name) {
  droidheap_registry* registry = droidheap_get_registry();
  if (registry == NULL) return &droidheap_nowhere;
  uint32_t slot = __atomic_fetch_add(&registry->heap_count, 1, __ATOMIC_SEQ_CST);
  if (slot >= DROIDHEAP_REGISTRY_HEAPS) return &droidheap_nowhere;
  droidheap_heap* heap = &registry->heaps[slot];
  size_t length = strlen(name);
  if (length > DROIDHEAP_HEAP_NAME_SIZE - 1) length = DROIDHEAP_HEAP_NAME_SIZE - 1;
  memcpy(heap->name, name, length);
  __atomic_store_n(&heap->ready, 1, __ATOMIC_SEQ_CST);
  /* Either the profiler sees `ready` when it walks the registry, or this sees its `attach`. */
  uint64_t attach = __atomic_load_n(&registry->attach, __ATOMIC_SEQ_CST);
  if (attach != 0) ((droidheap_attach_fn)(uintptr_t)attach)(registry);
  return heap;
}

static inline void droidheap_report(droidheap_heap* heap, uint32_t event, const void* address,
                                    size_t size) {
  if (__builtin_expect(__atomic_load_n(&heap->enabled, __ATOMIC_ACQUIRE) != 0, 0)) {
    uint64_t report = __atomic_load_n(&heap->report, __ATOMIC_RELAXED);
    ((droidheap_report_fn)(uintptr_t)report)(heap, event, (uint64_t)(uintptr_t)address,
                                             (uint64_t)size);
  }
}

static inline void droidheap_report_alloc(droidheap_heap* heap, const void* address, size_t size) {
  droidheap_report(heap, DROIDHEAP_EVENT_ALLOC, address, size);
}

static inline void droidheap_report_free(droidheap_heap* heap, const void* address, size_t size) {
  droidheap_report(heap, DROIDHEAP_EVENT_FREE, address, size);
}

#ifdef __cplusplus
}
#endif

#endif /* DROIDHEAP_HEAPS_H_ */

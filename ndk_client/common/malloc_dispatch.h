// bionic's MallocDispatch table (LP64 field order), shared by the emulation layer (which owns the
// table a process allocates through) and the client library (which receives the previous table in
// heapprofd_initialize and exports one replacement function per slot). One definition for both, so
// the layout cannot drift.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <malloc.h>

#if defined(__BIONIC__)
using droidheap_mallinfo = struct mallinfo;
#else
using droidheap_mallinfo = struct mallinfo;
#endif

extern "C" {
typedef void* (*MallocCalloc)(size_t, size_t);
typedef void (*MallocFree)(void*);
typedef droidheap_mallinfo (*MallocMallinfo)();
typedef void* (*MallocMalloc)(size_t);
typedef size_t (*MallocMallocUsableSize)(const void*);
typedef void* (*MallocMemalign)(size_t, size_t);
typedef int (*MallocPosixMemalign)(void**, size_t, size_t);
typedef void* (*MallocRealloc)(void*, size_t);
typedef int (*MallocIterate)(uintptr_t, size_t, void (*)(uintptr_t, size_t, void*), void*);
typedef void (*MallocMallocDisable)();
typedef void (*MallocMallocEnable)();
typedef int (*MallocMallopt)(int, int);
typedef void* (*MallocAlignedAlloc)(size_t, size_t);
typedef int (*MallocMallocInfo)(int, FILE*);

struct MallocDispatch {
  MallocCalloc calloc;
  MallocFree free;
  MallocMallinfo mallinfo;
  MallocMalloc malloc;
  MallocMallocUsableSize malloc_usable_size;
  MallocMemalign memalign;
  MallocPosixMemalign posix_memalign;
  MallocRealloc realloc;
  MallocIterate malloc_iterate;
  MallocMallocDisable malloc_disable;
  MallocMallocEnable malloc_enable;
  MallocMallopt mallopt;
  MallocAlignedAlloc aligned_alloc;
  MallocMallocInfo malloc_info;
} __attribute__((aligned(32)));

// The client library's entry points, as bionic resolves them by name ("heapprofd_" + suffix).
typedef bool (*HeapprofdInitialize)(const MallocDispatch*, bool* zygote_child, const char* options);
typedef void (*HeapprofdFinalize)();
}

// bionic's MallocDispatch table, shared by the emulation layer (which owns the table a process
// allocates through) and the client library (which receives the previous table in
// heapprofd_initialize and exports one replacement function per slot). One definition for both, so
// the layout cannot drift. 32-bit bionic (HAVE_DEPRECATED_MALLOC_FUNCS, set when !__LP64__) has
// two more slots, pvalloc and valloc, and refuses a client that does not export them.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <malloc.h>

#include <type_traits>

// The mallinfo slot's struct. bionic's has size_t fields. glibc's mallinfo has int fields, which
// wrap past 2 GiB; its mallinfo2 (2.33) has size_t ones, and the table is ours there (the
// emulation layer's, or the preload library's), so it carries mallinfo2.
#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 33)
#define DROIDHEAP_MALLINFO2 1
#endif
#endif
#if defined(DROIDHEAP_MALLINFO2)
using droidheap_mallinfo = struct mallinfo2;
constexpr char kMallinfoSymbol[] = "mallinfo2";
#else
using droidheap_mallinfo = struct mallinfo;
constexpr char kMallinfoSymbol[] = "mallinfo";
#endif

// What a mallinfo answer means, which differs between allocators: bytes in blocks handed out,
// bytes the allocator holds free, bytes it took from the system. glibc counts mmapped blocks
// apart from the arenas (hblkhd); bionic's allocators (scudo, jemalloc) count every block in
// uordblks and what they mapped in hblkhd.
struct AllocatorFigures {
  uint64_t in_use_bytes;
  uint64_t free_bytes;
  uint64_t system_bytes;
  uint64_t free_blocks;  // those the answer walked (kMallinfoWalksFreeBlocks), else 0
};
// glibc's mallinfo visits every free block, a miss to memory each, with the arenas locked (a
// freed hash of 800k keys: 0.5 s); bionic's allocators add up statistics they keep.
#if defined(__BIONIC__)
constexpr bool kMallinfoWalksFreeBlocks = false;
#else
constexpr bool kMallinfoWalksFreeBlocks = true;
#endif
// A field as unsigned: the int fields of an old glibc's mallinfo then wrap at 4 GiB, not 2.
template <typename Field>
inline uint64_t MallinfoField(Field value) {
  return static_cast<std::make_unsigned_t<Field>>(value);
}
inline AllocatorFigures InterpretMallinfo(const droidheap_mallinfo& info) {
#if defined(__BIONIC__)
  return {MallinfoField(info.uordblks), MallinfoField(info.fordblks), MallinfoField(info.hblkhd),
          0};
#else
  // ordblks: the free blocks in the bins; smblks: those in the fast bins.
  return {MallinfoField(info.uordblks) + MallinfoField(info.hblkhd), MallinfoField(info.fordblks),
          MallinfoField(info.arena) + MallinfoField(info.hblkhd),
          MallinfoField(info.ordblks) + MallinfoField(info.smblks)};
#endif
}

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
#if !defined(__LP64__)
#define DROIDHEAP_DEPRECATED_MALLOC_SLOTS 1
typedef void* (*MallocPvalloc)(size_t);
typedef void* (*MallocValloc)(size_t);
#endif

struct MallocDispatch {
  MallocCalloc calloc;
  MallocFree free;
  MallocMallinfo mallinfo;
  MallocMalloc malloc;
  MallocMallocUsableSize malloc_usable_size;
  MallocMemalign memalign;
  MallocPosixMemalign posix_memalign;
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
  MallocPvalloc pvalloc;
#endif
  MallocRealloc realloc;
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
  MallocValloc valloc;
#endif
  MallocIterate malloc_iterate;
  MallocMallocDisable malloc_disable;
  MallocMallocEnable malloc_enable;
  MallocMallopt mallopt;
  MallocAlignedAlloc aligned_alloc;
  MallocMallocInfo malloc_info;
} __attribute__((aligned(32)));
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
static_assert(offsetof(MallocDispatch, malloc_info) == 15 * sizeof(void*), "bionic's LP32 order");
#else
static_assert(offsetof(MallocDispatch, malloc_info) == 13 * sizeof(void*), "bionic's LP64 order");
#endif

// The client library's entry points, as bionic resolves them by name ("heapprofd_" + suffix).
typedef bool (*HeapprofdInitialize)(const MallocDispatch*, bool* zygote_child, const char* options);
typedef void (*HeapprofdFinalize)();
}

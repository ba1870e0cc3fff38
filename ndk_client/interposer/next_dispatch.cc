// An interposing library's real allocator: the malloc family of the next library in the search
// order, found with dlsym(RTLD_NEXT): bionic's libc under the preload library on a phone; glibc's,
// or an allocator preloaded after ours, under the emulation layer. Not glibc's __libc_* entry
// points, which no interposer can shadow: with jemalloc preloaded, blocks glibc handed out met
// jemalloc's malloc_usable_size (which nothing of ours interposes) and the program crashed.
//
// Resolved on first use, not in the constructor: the loader and other libraries' constructors
// allocate before ours runs. One thread resolves; others wait for it. dlsym may itself allocate
// (glibc does on some paths): what the resolving thread allocates meanwhile comes from a small
// static arena, which is never returned; free and realloc then recognise its blocks for good.
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "common/platform.h"
#include "interposer/dispatch.h"

namespace droidheap {
namespace {

// What the next library may not export (bionic before API 28 has no aligned_alloc; glibc has no
// malloc_iterate): the stand-ins say "unsupported" or fall back, as bionic's callers expect.
int UnsupportedIterate(uintptr_t, size_t, void (*)(uintptr_t, size_t, void*), void*) {
  errno = ENOTSUP;
  return -1;
}
void NoOp() {}
int UnsupportedMallopt(int, int) { return 0; }
int UnsupportedMallocInfo(int, FILE*) {
  errno = ENOTSUP;
  return -1;
}
droidheap_mallinfo EmptyMallinfo() { return droidheap_mallinfo{}; }

MallocDispatch g_next;  // filled once by the resolving thread, read after g_state is kResolved
MallocFree g_next_free;
MallocRealloc g_next_realloc;
MallocMallocUsableSize g_next_usable_size;

void* NextAlignedAlloc(size_t alignment, size_t size) { return g_next.memalign(alignment, size); }
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
void* NextValloc(size_t size) { return g_next.memalign(static_cast<size_t>(getpagesize()), size); }
void* NextPvalloc(size_t size) {
  size_t page = static_cast<size_t>(getpagesize());
  return g_next.memalign(page, (size + page - 1) & ~(page - 1));
}
#endif

// The arena: 16-byte header (the block's size), then the block.
constexpr size_t kArenaSize = 64 * 1024;
constexpr size_t kArenaAlign = 16;
alignas(kArenaAlign) char g_arena[kArenaSize];
std::atomic<size_t> g_arena_used{0};

bool InArena(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  auto base = reinterpret_cast<uintptr_t>(g_arena);
  return address >= base && address < base + kArenaSize;
}

size_t ArenaBlockSize(const void* p) {
  size_t size;
  memcpy(&size, static_cast<const char*>(p) - kArenaAlign, sizeof(size));
  return size;
}

void* ArenaAlloc(size_t size, size_t alignment) {
  if (alignment < kArenaAlign) alignment = kArenaAlign;
  size_t used = g_arena_used.load(std::memory_order_relaxed);
  while (true) {
    size_t start = (used + kArenaAlign + alignment - 1) & ~(alignment - 1);
    if (start + size > kArenaSize || start + size < start) {
      errno = ENOMEM;
      return nullptr;
    }
    if (g_arena_used.compare_exchange_weak(used, start + size)) {
      memcpy(g_arena + start - kArenaAlign, &size, sizeof(size));
      return g_arena + start;
    }
  }
}

void NextFree(void* p) {
  if (!InArena(p)) g_next_free(p);
}

void* NextRealloc(void* p, size_t size) {
  if (!InArena(p)) return g_next_realloc(p, size);
  void* moved = g_next.malloc(size);
  if (moved != nullptr) memcpy(moved, p, ArenaBlockSize(p) < size ? ArenaBlockSize(p) : size);
  return moved;
}

size_t NextUsableSize(const void* p) { return InArena(p) ? ArenaBlockSize(p) : g_next_usable_size(p); }

template <typename Fn>
void Find(const char* name, Fn* out, Fn fallback) {
  void* symbol = dlsym(RTLD_NEXT, name);
  *out = symbol != nullptr ? reinterpret_cast<Fn>(symbol) : fallback;
}

// The table in force until the first call resolves the real one (below, constant-initialised).
extern const MallocDispatch kFirstUseDispatch;

enum State : int { kUnresolved, kResolving, kResolved };
std::atomic<int> g_state{kUnresolved};
DROIDHEAP_TLS bool t_resolving = false;

// The real table, or nullptr when this thread is the one resolving it (use the arena).
const MallocDispatch* Next() {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kResolved) return &g_next;
  if (t_resolving) return nullptr;
  int expected = kUnresolved;
  if (g_state.compare_exchange_strong(expected, kResolving, std::memory_order_acq_rel)) {
    t_resolving = true;
    MallocDispatch d{};
    Find("calloc", &d.calloc, static_cast<MallocCalloc>(nullptr));
    Find("free", &g_next_free, static_cast<MallocFree>(nullptr));
    Find(kMallinfoSymbol, &d.mallinfo, EmptyMallinfo);
    Find("malloc", &d.malloc, static_cast<MallocMalloc>(nullptr));
    Find("malloc_usable_size", &g_next_usable_size, static_cast<MallocMallocUsableSize>(nullptr));
    Find("memalign", &d.memalign, static_cast<MallocMemalign>(nullptr));
    Find("posix_memalign", &d.posix_memalign, static_cast<MallocPosixMemalign>(nullptr));
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
    Find("pvalloc", &d.pvalloc, NextPvalloc);
    Find("valloc", &d.valloc, NextValloc);
#endif
    Find("realloc", &g_next_realloc, static_cast<MallocRealloc>(nullptr));
    // bionic's alone. Asked of glibc, dlsym fails, and the error it allocates (from the arena)
    // would send every later free through the arena's check: 1 ns more a malloc+free pair.
    if (kAllocatorListsBlocks) {
      Find("malloc_iterate", &d.malloc_iterate, UnsupportedIterate);
      Find("malloc_disable", &d.malloc_disable, NoOp);
      Find("malloc_enable", &d.malloc_enable, NoOp);
    } else {
      d.malloc_iterate = UnsupportedIterate;
      d.malloc_disable = NoOp;
      d.malloc_enable = NoOp;
    }
    Find("mallopt", &d.mallopt, UnsupportedMallopt);
    Find("aligned_alloc", &d.aligned_alloc, NextAlignedAlloc);
    Find("malloc_info", &d.malloc_info, UnsupportedMallocInfo);
    // Only this thread allocates from the arena, and only until here: when it did not, no block
    // can be the arena's, and free and realloc go straight to the real allocator.
    bool arena_used = g_arena_used.load(std::memory_order_relaxed) != 0;
    d.free = arena_used ? NextFree : g_next_free;
    d.realloc = arena_used ? NextRealloc : g_next_realloc;
    d.malloc_usable_size = arena_used ? NextUsableSize : g_next_usable_size;
    if (d.calloc == nullptr || g_next_free == nullptr || d.malloc == nullptr ||
        g_next_usable_size == nullptr || d.memalign == nullptr || d.posix_memalign == nullptr ||
        g_next_realloc == nullptr) {
      // No allocator after us: nothing can work. Say so the only way left, and stop.
      static const char kMessage[] = "libdroidheap_preload: no malloc after it in the search order\n";
      (void)!write(2, kMessage, sizeof(kMessage) - 1);
      _exit(127);
    }
    g_next = d;
    t_resolving = false;
    g_state.store(kResolved, std::memory_order_release);
    // From now on every call goes straight to the real allocator (unless a client took over).
    const MallocDispatch* first = &kFirstUseDispatch;
    g_dispatch.compare_exchange_strong(first, &g_next, std::memory_order_acq_rel);
    return &g_next;
  }
  while (g_state.load(std::memory_order_acquire) != kResolved) sched_yield();
  return &g_next;
}

// Until the first call resolves the table, these stand in for it.
void* FirstMalloc(size_t size) {
  const MallocDispatch* next = Next();
  return next ? next->malloc(size) : ArenaAlloc(size, kArenaAlign);
}
void* FirstCalloc(size_t n, size_t size) {
  const MallocDispatch* next = Next();
  if (next) return next->calloc(n, size);
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return ArenaAlloc(total, kArenaAlign);  // static memory: zero until handed out, never reused
}
void FirstFree(void* p) {
  if (p == nullptr || InArena(p)) return;
  Next()->free(p);  // a block from the real allocator: the table was resolved to allocate it
}
void* FirstRealloc(void* p, size_t size) {
  const MallocDispatch* next = Next();
  if (next) return next->realloc(p, size);
  void* moved = ArenaAlloc(size, kArenaAlign);
  if (moved != nullptr && p != nullptr) {
    memcpy(moved, p, ArenaBlockSize(p) < size ? ArenaBlockSize(p) : size);
  }
  return moved;
}
void* FirstMemalign(size_t alignment, size_t size) {
  const MallocDispatch* next = Next();
  return next ? next->memalign(alignment, size) : ArenaAlloc(size, alignment);
}
int FirstPosixMemalign(void** out, size_t alignment, size_t size) {
  const MallocDispatch* next = Next();
  if (next) return next->posix_memalign(out, alignment, size);
  *out = ArenaAlloc(size, alignment);
  return *out ? 0 : ENOMEM;
}
void* FirstAlignedAlloc(size_t alignment, size_t size) {
  const MallocDispatch* next = Next();
  return next ? next->aligned_alloc(alignment, size) : ArenaAlloc(size, alignment);
}
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
void* FirstPvalloc(size_t size) {
  const MallocDispatch* next = Next();
  size_t page = static_cast<size_t>(getpagesize());
  return next ? next->pvalloc(size) : ArenaAlloc((size + page - 1) & ~(page - 1), page);
}
void* FirstValloc(size_t size) {
  const MallocDispatch* next = Next();
  return next ? next->valloc(size) : ArenaAlloc(size, static_cast<size_t>(getpagesize()));
}
#endif
size_t FirstUsableSize(const void* p) {
  if (InArena(p)) return ArenaBlockSize(p);
  return Next()->malloc_usable_size(p);
}
droidheap_mallinfo FirstMallinfo() { return Next() ? g_next.mallinfo() : EmptyMallinfo(); }
int FirstIterate(uintptr_t base, size_t size, void (*fn)(uintptr_t, size_t, void*), void* arg) {
  return Next() ? g_next.malloc_iterate(base, size, fn, arg) : UnsupportedIterate(base, size, fn, arg);
}
void FirstDisable() {
  if (Next()) g_next.malloc_disable();
}
void FirstEnable() {
  if (Next()) g_next.malloc_enable();
}
int FirstMallopt(int param, int value) { return Next() ? g_next.mallopt(param, value) : 0; }
int FirstMallocInfo(int options, FILE* fp) {
  return Next() ? g_next.malloc_info(options, fp) : UnsupportedMallocInfo(options, fp);
}

// Constant-initialised, so it is in force before any code of ours has run.
const MallocDispatch kFirstUseDispatch = {
    FirstCalloc,   FirstFree,          FirstMallinfo, FirstMalloc, FirstUsableSize,
    FirstMemalign, FirstPosixMemalign,
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
    FirstPvalloc,
#endif
    FirstRealloc,
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
    FirstValloc,
#endif
    FirstIterate,  FirstDisable,       FirstEnable,   FirstMallopt, FirstAlignedAlloc,
    FirstMallocInfo,
};

}  // namespace

std::atomic<const MallocDispatch*> g_dispatch{&kFirstUseDispatch};

const MallocDispatch* RealDispatch() { return Next(); }

}  // namespace droidheap

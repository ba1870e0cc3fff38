// The few differences between bionic and glibc, and between 32- and 64-bit builds, that the native
// code meets, in one place.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>

// Thread-locals of the code loaded into the profiled process. glibc allocates a dlopened library's
// dynamic TLS block with malloc, on first touch -- re-entering our own hooks -- so the static
// (initial-exec) model is used there; bionic refuses that model in dlopened libraries and its ELF
// TLS (API 29 and later) never allocates through malloc. Below API 29 the NDK emulates TLS with
// malloc: CMakeLists.txt refuses to build for it. __thread, not thread_local: it admits only
// constant initialisation, so code of another file that uses one (client/hook_path.h) reaches it
// directly, where an extern thread_local goes through a check for an initialisation function.
#if defined(__BIONIC__)
#define DROIDHEAP_TLS __thread
#else
#define DROIDHEAP_TLS __thread __attribute__((tls_model("initial-exec")))
#endif

// A thread-local of an executable (droidheapd, the native tests): bionic on arm64 (and arm) refuses
// to run an executable whose TLS segment is aligned to less than 64 (32) bytes, the room it keeps
// for its own slots first; the NDK's startup files add such a variable, a plain build does not.
#define DROIDHEAP_EXECUTABLE_TLS alignas(64) thread_local

// File offsets are 64-bit in every build: the daemon reads /proc/<pid>/mem at the target's
// addresses, above 2 GiB in 32-bit processes too, and maps shared memory by offset. CMakeLists.txt
// defines _FILE_OFFSET_BITS=64, which glibc honours and bionic does for every call used here from
// API 21 (scripts/build_ndk.sh builds for 29).
static_assert(sizeof(off_t) == 8, "build with -D_FILE_OFFSET_BITS=64 (CMakeLists.txt does)");

// memfd_create's flags and the file seals, for the system call itself: bionic declares
// memfd_create, and with it these, only from API 30 (glibc from 2.27).
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif

// lseek's SEEK_HOLE (Linux 3.1): bionic declares it only for _GNU_SOURCE builds, which the NDK's
// clang is not (g++ is, for glibc).
#ifndef SEEK_HOLE
#define SEEK_HOLE 4
#endif

// close_range (Linux 5.9), the same number on every ABI; older headers lack it.
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#if defined(__GLIBC__)
extern "C" void* __libc_stack_end;  // glibc's loader: the stack pointer the program started with
#endif

namespace droidheap {

// Whether the allocator under the client can list its blocks: bionic's malloc_iterate (with
// malloc_disable and malloc_enable around it, as libmemunreachable uses them). glibc's cannot.
#if defined(__BIONIC__)
constexpr bool kAllocatorListsBlocks = true;
#else
constexpr bool kAllocatorListsBlocks = false;
#endif

// Whether getpid() answers from a cache in the thread rather than by a system call (bionic: yes,
// and a vfork child clears its cache; glibc 2.25 and later: no).
#if defined(__BIONIC__)
constexpr bool kLibcCachesPid = true;
#else
constexpr bool kLibcCachesPid = false;
#endif

// The top of the current thread's frames, given the stack pthread_getattr_np reports, [low, high),
// the address of one of our own thread-locals and the current stack pointer: what a sample copies
// stops here. bionic reports the frames' range. glibc's range holds more, above every frame: for
// the main thread argv, the environment and the aux vector above the stack pointer it started
// with (__libc_stack_end); for a thread it created, the thread's descriptor and static TLS, and
// below them the unused part of the static TLS surplus that glibc keeps for libraries loaded
// later: zeroes, never written, about 2 KiB. Kilobytes that every sample would copy for nothing.
// So a thread's frames end at the first word that is not zero, read down from the lowest
// thread-local in sight. (A frame beyond the copy is still read, from /proc/<pid>/mem, slower.)
inline uint64_t FramesTop(uint64_t low, uint64_t high, const void* own_thread_local, uint64_t sp) {
#if defined(__GLIBC__)
  const uint64_t stack_end = reinterpret_cast<uintptr_t>(__libc_stack_end);
  if (stack_end > low && stack_end <= high) return stack_end;  // the main thread
  uint64_t top = high;
  const void* above_frames[] = {own_thread_local, &errno, reinterpret_cast<void*>(pthread_self())};
  for (const void* p : above_frames) {
    uint64_t address = reinterpret_cast<uintptr_t>(p);
    if (address > low && address < top) top = address;
  }
  top &= ~uint64_t{sizeof(uintptr_t) - 1};
  // Never below the stack pointer (a sample on an alternate signal stack: the thread's own range).
  const uint64_t floor = sp > low && sp < top ? sp : low;
  while (top > floor && *reinterpret_cast<const uintptr_t*>(static_cast<uintptr_t>(top) -
                                                            sizeof(uintptr_t)) == 0) {
    top -= sizeof(uintptr_t);
  }
  return top;
#else
  (void)low;
  (void)own_thread_local;
  (void)sp;
  return high;
#endif
}

}  // namespace droidheap

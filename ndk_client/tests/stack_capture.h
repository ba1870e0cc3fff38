// Stacks captured the way the client captures them (DroidheapCaptureRegisters, then a copy of
// the stack from sp up), next to a reference unwind of the same stack (below), through code without
// frame pointers: recursion, a qsort callback in libc, the C++ library. For the unwinder's tests, in
// this process (dwarf_unwinder_test) or in a 32-bit one (unwind_capture_helper for
// cross_abi_unwind_test).
#pragma once

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#if !defined(__BIONIC__)
#include <unwind.h>
#endif

#include <algorithm>
#include <functional>
#include <type_traits>
#include <vector>

#include "client/register_capture.h"
#include "tests/test_util.h"
#include "unwinder/registers.h"

#define NOINLINE __attribute__((noinline))
// The code under test is what Android and distributions ship: no frame pointers.
#define NO_FRAME_POINTER __attribute__((optimize("omit-frame-pointer")))

namespace droidheap {
namespace stack_capture {

constexpr size_t kMaxStackCopy = 64 * 1024;

// The reference, return addresses from the capturing frame's caller on:
// - glibc: libgcc's in-process unwind (_Unwind_Backtrace), every frame.
// - bionic: no unwinder to link against. Android 10's arm64 libraries export none, and the libgcc
//   one its armeabi-v7a libc.so exports (LIBC_PRIVATE) calls libc's __aeabi_unwind_cpp_pr0, a
//   trapping stub, at the first compact-model entry: SIGILL. (The NDK links LLVM's libunwind.a,
//   which this build has not.) The reference is then the return addresses that the frames these
//   helpers make record themselves (__builtin_return_address), in order; the frames of libc, of
//   the C++ library and of the test's own functions come between them.
#if defined(__BIONIC__)
constexpr bool kEveryFrameInReference = false;
#else
constexpr bool kEveryFrameInReference = true;
#endif

struct Capture {
  uint64_t regs[kMaxRegisters] = {};
  std::vector<uint8_t> stack;
  uint64_t stack_top = 0;  // set when the copy reached the top of the thread's stack
  std::vector<uint64_t> reference;  // leaf first (while frames record: root first)
};

// Whether an unwinder's return addresses (the capturing frame's own pc dropped) agree with the
// capture's reference: equal to it, or on bionic holding it in order from the first on.
inline bool MatchesReference(const std::vector<uint64_t>& pcs, const Capture& capture) {
  if (kEveryFrameInReference) return pcs == capture.reference;
  if (pcs.empty() || capture.reference.empty() || pcs[0] != capture.reference[0]) return false;
  size_t found = 0;
  for (uint64_t pc : pcs) {
    if (found < capture.reference.size() && pc == capture.reference[found]) ++found;
  }
  return found == capture.reference.size();
}

// Bionic's reference: the calling frame's return address, `return_address` being its
// __builtin_return_address(0). On 32-bit ARM Thumb's bit 0 cleared, as unwinders report pcs (an
// x86 return address may be odd: kept whole).
inline void RecordFrame(Capture* out, const void* return_address) {
  if (kEveryFrameInReference) return;
#if defined(__arm__)
  constexpr uintptr_t kPcMask = ~uintptr_t{1};
#else
  constexpr uintptr_t kPcMask = ~uintptr_t{0};
#endif
  out->reference.push_back(reinterpret_cast<uintptr_t>(return_address) & kPcMask);
}

#if !defined(__BIONIC__)
inline _Unwind_Reason_Code CollectIp(struct _Unwind_Context* context, void* arg) {
  auto* ips = static_cast<std::vector<uint64_t>*>(arg);
  ips->push_back(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}
#endif

inline uint64_t ThreadStackTop() {
  pthread_attr_t attr;
  void* low = nullptr;
  size_t size = 0;
  CHECK(pthread_getattr_np(pthread_self(), &attr) == 0);
  CHECK(pthread_attr_getstack(&attr, &low, &size) == 0);
  pthread_attr_destroy(&attr);
  return reinterpret_cast<uintptr_t>(low) + size;
}

// The raw copy, as the client makes it: the bytes of other frames, which AddressSanitizer's
// redzones between locals make look like overflows. Word by word through volatile reads, which no
// compiler turns into a memcpy that the sanitizer would check anyway.
__attribute__((no_sanitize("address"))) inline void CopyStack(uint64_t sp, uint64_t size,
                                                              std::vector<uint8_t>* out) {
  out->resize(size);
  const volatile uint8_t* from = reinterpret_cast<const volatile uint8_t*>(static_cast<uintptr_t>(sp));
  for (uint64_t i = 0; i < size; ++i) (*out)[i] = from[i];
}

inline NOINLINE void CaptureHere(Capture* out) {
  uint64_t captured[kNativeCaptured];
  DroidheapCaptureRegisters(captured);
  ExpandCapturedRegisters(kNativeLayout, captured, out->regs);
  uint64_t sp = out->regs[kRegSp];
  uint64_t top = ThreadStackTop();
  uint64_t size = std::min<uint64_t>(top - sp, kMaxStackCopy);
  if (size < kMaxStackCopy) out->stack_top = top;
  CopyStack(sp, size, &out->stack);
#if defined(__BIONIC__)
  RecordFrame(out, __builtin_return_address(0));
  std::reverse(out->reference.begin(), out->reference.end());
#else
  _Unwind_Backtrace(CollectIp, &out->reference);
  // Both start in this function; from its caller on they must agree. libgcc also reports the
  // outermost frame's undefined return address as a last frame at 0, which is no frame.
  out->reference.erase(out->reference.begin());
  while (!out->reference.empty() && out->reference.back() == 0) out->reference.pop_back();
#endif
}

inline NOINLINE NO_FRAME_POINTER int Recurse(int depth, Capture* out) {
  RecordFrame(out, __builtin_return_address(0));
  if (depth == 0) {
    CaptureHere(out);
    return 0;
  }
  volatile int keep = depth;  // a frame of its own, and no tail call
  return Recurse(depth - 1, out) + keep;
}

inline Capture* g_qsort_capture = nullptr;
inline NOINLINE NO_FRAME_POINTER int CompareAndCapture(const void* a, const void* b) {
  if (g_qsort_capture != nullptr) {
    RecordFrame(g_qsort_capture, __builtin_return_address(0));  // into libc's qsort
    Recurse(3, g_qsort_capture);
    g_qsort_capture = nullptr;
  }
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

inline NOINLINE NO_FRAME_POINTER void ThroughQsort(Capture* out) {
  RecordFrame(out, __builtin_return_address(0));
  int values[] = {5, 3, 9, 1, 7};
  g_qsort_capture = out;
  qsort(values, 5, sizeof(int), CompareAndCapture);
}

inline NOINLINE NO_FRAME_POINTER void ThroughStdFunction(Capture* out) {
  RecordFrame(out, __builtin_return_address(0));
  std::function<void()> call = [out] { Recurse(5, out); };
  std::vector<std::function<void()>> calls(3, call);
  std::for_each(calls.begin(), calls.begin() + 1, [](const std::function<void()>& f) { f(); });
}

// A capture as one process hands it to another (unwind_capture_helper to cross_abi_unwind_test),
// the same bytes in a 32- and a 64-bit build: this header, the stack copy, the reference pcs.
struct alignas(8) CaptureHeader {
  uint32_t abi;  // Abi of the capturing process
  uint32_t stack_size;
  uint32_t reference_count;
  uint32_t reserved;
  uint64_t stack_pointer;
  uint64_t stack_top;
  uint64_t regs[kMaxRegisters];
};
static_assert(sizeof(CaptureHeader) == 32 + 8 * kMaxRegisters, "one layout in every build");

// All `size` bytes through read() or write() (`transfer`), however a pipe splits them.
template <typename Pointer, typename Transfer>
bool TransferAll(int fd, Pointer data, size_t size, Transfer transfer) {
  auto* p = reinterpret_cast<std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>,
                                                const char*, char*>>(data);
  while (size > 0) {
    ssize_t n = transfer(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}
inline bool WriteAll(int fd, const void* data, size_t size) {
  return TransferAll(fd, data, size, write);
}
inline bool ReadAll(int fd, void* data, size_t size) { return TransferAll(fd, data, size, read); }

inline bool WriteCapture(int fd, const Capture& capture) {
  CaptureHeader header{};
  header.abi = static_cast<uint32_t>(kNativeAbi);
  header.stack_size = static_cast<uint32_t>(capture.stack.size());
  header.reference_count = static_cast<uint32_t>(capture.reference.size());
  header.stack_pointer = capture.regs[kRegSp];
  header.stack_top = capture.stack_top;
  std::copy(capture.regs, capture.regs + kMaxRegisters, header.regs);
  return WriteAll(fd, &header, sizeof(header)) &&
         WriteAll(fd, capture.stack.data(), capture.stack.size()) &&
         WriteAll(fd, capture.reference.data(), capture.reference.size() * sizeof(uint64_t));
}

// The capture's ABI in *abi. Sizes are bounded: the writer is a test helper, but still a peer.
inline bool ReadCapture(int fd, Capture* capture, Abi* abi) {
  CaptureHeader header;
  if (!ReadAll(fd, &header, sizeof(header)) || header.stack_size > kMaxStackCopy ||
      header.reference_count > 4096) {
    return false;
  }
  *abi = static_cast<Abi>(header.abi);
  std::copy(header.regs, header.regs + kMaxRegisters, capture->regs);
  capture->stack_top = header.stack_top;
  capture->stack.resize(header.stack_size);
  capture->reference.resize(header.reference_count);
  return ReadAll(fd, capture->stack.data(), capture->stack.size()) &&
         ReadAll(fd, capture->reference.data(), capture->reference.size() * sizeof(uint64_t));
}

}  // namespace stack_capture
}  // namespace droidheap

// The unwinder against libgcc's in-process unwinder on this very process: stacks through code
// without frame pointers (recursion, a qsort callback, libstdc++), captured the way the client
// captures them and unwound out of process style (copy + /proc/self/mem + /proc/self/maps).
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "client/register_capture.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_unwinder.h"

using namespace droidheap;

namespace {

#define NOINLINE __attribute__((noinline))
// The code under test is what Android and distributions ship: no frame pointers.
#define NO_FRAME_POINTER __attribute__((optimize("omit-frame-pointer")))

constexpr size_t kMaxStackCopy = 64 * 1024;

struct Capture {
  uint64_t regs[kMaxRegisters] = {};
  std::vector<uint8_t> stack;
  uint64_t stack_top = 0;  // set when the copy reached the top of the thread's stack
  std::vector<uint64_t> reference;  // libgcc's return addresses, from the capturing frame's caller
};

_Unwind_Reason_Code CollectIp(struct _Unwind_Context* context, void* arg) {
  auto* ips = static_cast<std::vector<uint64_t>*>(arg);
  ips->push_back(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}

uint64_t ThreadStackTop() {
  pthread_attr_t attr;
  void* low = nullptr;
  size_t size = 0;
  CHECK(pthread_getattr_np(pthread_self(), &attr) == 0);
  CHECK(pthread_attr_getstack(&attr, &low, &size) == 0);
  pthread_attr_destroy(&attr);
  return reinterpret_cast<uintptr_t>(low) + size;
}

NOINLINE void CaptureHere(Capture* out) {
  DroidheapCaptureRegisters(out->regs);
  uint64_t sp = out->regs[kRegSp];
  uint64_t top = ThreadStackTop();
  uint64_t size = std::min<uint64_t>(top - sp, kMaxStackCopy);
  if (size < kMaxStackCopy) out->stack_top = top;
  const uint8_t* stack = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sp));
  out->stack.assign(stack, stack + size);
  _Unwind_Backtrace(CollectIp, &out->reference);
  // Both start in this function; from its caller on they must agree. libgcc also reports the
  // outermost frame's undefined return address as a last frame at 0, which is no frame.
  out->reference.erase(out->reference.begin());
  while (!out->reference.empty() && out->reference.back() == 0) out->reference.pop_back();
}

NOINLINE NO_FRAME_POINTER int Recurse(int depth, Capture* out) {
  if (depth == 0) {
    CaptureHere(out);
    return 0;
  }
  volatile int keep = depth;  // a frame of its own, and no tail call
  return Recurse(depth - 1, out) + keep;
}

NOINLINE NO_FRAME_POINTER int CompareAndCapture(const void* a, const void* b);
Capture* g_qsort_capture = nullptr;
int CompareAndCapture(const void* a, const void* b) {
  if (g_qsort_capture != nullptr) {
    Recurse(3, g_qsort_capture);
    g_qsort_capture = nullptr;
  }
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

NOINLINE NO_FRAME_POINTER void ThroughQsort(Capture* out) {
  int values[] = {5, 3, 9, 1, 7};
  g_qsort_capture = out;
  qsort(values, 5, sizeof(int), CompareAndCapture);
}

NOINLINE NO_FRAME_POINTER void ThroughStdFunction(Capture* out) {
  std::function<void()> call = [out] { Recurse(5, out); };
  std::vector<std::function<void()>> calls(3, call);
  std::for_each(calls.begin(), calls.begin() + 1, [](const std::function<void()>& f) { f(); });
}

std::vector<uint64_t> UnwindCapture(DwarfUnwinder* unwinder, ProcessMaps* maps, int maps_fd,
                                    int mem_fd, const Capture& capture, UnwindError* error) {
  StackMemory memory(capture.regs[kRegSp], capture.stack.data(), capture.stack.size(), mem_fd);
  UnwindResult result;
  unwinder->Unwind(kNativeLayout, capture.regs, capture.stack_top, memory, maps, maps_fd, 512,
                   &result);
  *error = result.error;
  // Drop the capturing frame, as the reference does.
  result.pcs.erase(result.pcs.begin());
  return result.pcs;
}

void ExpectAgreement(const char* what, const Capture& capture) {
  int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  int mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  CHECK(maps_fd >= 0 && mem_fd >= 0);
  ElfCache elf_cache;
  DwarfUnwinder unwinder(&elf_cache);
  ProcessMaps maps;
  CHECK(maps.Reload(maps_fd));
  for (int pass = 0; pass < 2; ++pass) {  // cold, then from the row cache
    UnwindError error;
    std::vector<uint64_t> pcs = UnwindCapture(&unwinder, &maps, maps_fd, mem_fd, capture, &error);
    if (pcs != capture.reference || error != UnwindError::kNone) {
      fprintf(stderr, "%s (pass %d): error %u\n  droidheap:", what, pass,
              static_cast<unsigned>(error));
      for (uint64_t pc : pcs) fprintf(stderr, " %lx", static_cast<unsigned long>(pc));
      fprintf(stderr, "\n  libgcc:   ");
      for (uint64_t pc : capture.reference) fprintf(stderr, " %lx", static_cast<unsigned long>(pc));
      fprintf(stderr, "\n");
      exit(1);
    }
  }
  CHECK(unwinder.stats().row_cache_hits > 0);
  CHECK(unwinder.stats().cfi_frames > 0);
  close(maps_fd);
  close(mem_fd);
}

void* ThreadMain(void* arg) {
  Recurse(10, static_cast<Capture*>(arg));
  return nullptr;
}

void TestDeepRecursion() {
  Capture capture;
  Recurse(70, &capture);
  CHECK(capture.reference.size() > 70);
  ExpectAgreement("recursion", capture);
}

void TestQsortCallback() {
  Capture capture;
  ThroughQsort(&capture);
  ExpectAgreement("qsort", capture);
}

void TestLibstdcxx() {
  Capture capture;
  ThroughStdFunction(&capture);
  ExpectAgreement("std::function", capture);
}

void TestThread() {
  Capture capture;
  pthread_t thread;
  CHECK(pthread_create(&thread, nullptr, ThreadMain, &capture) == 0);
  CHECK(pthread_join(thread, nullptr) == 0);
  CHECK(capture.stack_top != 0);  // the whole thread stack fit in the copy
  ExpectAgreement("thread", capture);
}

void TestGarbageRegistersFailCleanly() {
  Capture capture;
  Recurse(2, &capture);
  ElfCache elf_cache;
  DwarfUnwinder unwinder(&elf_cache);
  ProcessMaps maps;
  int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  CHECK(maps.Reload(maps_fd));
  for (uint64_t garbage : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{0x1234}}) {
    Capture bad = capture;
    bad.regs[kRegSp] = garbage;
    bad.regs[kRegFp] = garbage;
    UnwindError error;
    UnwindCapture(&unwinder, &maps, maps_fd, -1, bad, &error);  // must not crash or hang
    bad = capture;
    bad.regs[kRegPc] = garbage;
    UnwindCapture(&unwinder, &maps, maps_fd, -1, bad, &error);
    CHECK(error != UnwindError::kNone);
  }
  close(maps_fd);
}

}  // namespace

int main() {
  TestDeepRecursion();
  TestQsortCallback();
  TestLibstdcxx();
  TestThread();
  TestGarbageRegistersFailCleanly();
  printf("dwarf_unwinder_test: ok\n");
  return 0;
}

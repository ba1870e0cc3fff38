// The unwinder against a reference unwind of this very process (stack_capture.h: libgcc's on glibc):
// stacks through code without frame pointers (recursion, a qsort callback, the C++ library),
// captured the way the client captures them and unwound out of process style (copy +
// /proc/self/mem + /proc/self/maps).
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/small_file.h"
#include "daemon/handshake.h"
#include "tests/stack_capture.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_unwinder.h"

using namespace droidheap;
using namespace droidheap::stack_capture;

namespace {

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

// The host's view of this process's maps under qemu-user: the path of a thread's maps, which qemu
// does not take for the process's own (/proc/self/maps, /proc/<pid>/maps) and answers from procfs.
std::string HostViewOfOwnMaps() {
  static char text[1 << 16];
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/maps", getpid());
  CHECK(ReadSmallFile(path, text, sizeof(text)) > 0);
  return text;
}

void ExpectAgreement(const char* what, const Capture& capture) {
  int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  int mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  CHECK(maps_fd >= 0 && mem_fd >= 0);
  ElfCache elf_cache;
  DwarfUnwinder unwinder(&elf_cache);
  ProcessMaps maps;
  CHECK(maps.Reload(maps_fd));
  // Under qemu-user (the bionic runs) the guest's maps leave out libc.so's code, which the host's
  // view has (ProcessMaps::SetHostViewPid; the daemon reads it as /proc/<pid>/maps, which qemu
  // answers itself when the pid is its own).
  if (MapsAreEmulated()) maps.AddMissing(HostViewOfOwnMaps());
  for (int pass = 0; pass < 2; ++pass) {  // cold, then from the frame cache
    UnwindError error;
    std::vector<uint64_t> pcs = UnwindCapture(&unwinder, &maps, maps_fd, mem_fd, capture, &error);
    if (!MatchesReference(pcs, capture) || error != UnwindError::kNone) {
      fprintf(stderr, "%s (pass %d): error %u\n  droidheap:", what, pass,
              static_cast<unsigned>(error));
      for (uint64_t pc : pcs) fprintf(stderr, " %lx", static_cast<unsigned long>(pc));
      fprintf(stderr, "\n  reference:");
      for (uint64_t pc : capture.reference) fprintf(stderr, " %lx", static_cast<unsigned long>(pc));
      fprintf(stderr, "\n");
      exit(1);
    }
  }
  CHECK(unwinder.stats().frame_hits > 0);
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

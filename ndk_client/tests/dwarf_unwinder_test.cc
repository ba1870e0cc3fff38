// The unwinder against a reference unwind of this very process (stack_capture.h: libgcc's on glibc):
// stacks through code without frame pointers (recursion, a qsort callback, the C++ library),
// captured the way the client captures them and unwound out of process style (copy +
// /proc/self/mem + /proc/self/maps).
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/small_file.h"
#include "daemon/handshake.h"
#include "tests/stack_capture.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_unwinder.h"
#include "unwinder/remote_memory.h"

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

// An unwinder of this process, through its own maps and memory files.
struct OwnUnwinder {
  OwnUnwinder()
      : maps_fd(open("/proc/self/maps", O_RDONLY | O_CLOEXEC)),
        mem_fd(open("/proc/self/mem", O_RDONLY | O_CLOEXEC)),
        unwinder(&elf_cache) {
    CHECK(maps_fd >= 0 && mem_fd >= 0);
    CHECK(maps.Reload(maps_fd));
  }
  ~OwnUnwinder() {
    close(maps_fd);
    close(mem_fd);
  }

  int maps_fd;
  int mem_fd;
  ElfCache elf_cache;
  DwarfUnwinder unwinder;
  ProcessMaps maps;
};

void ExpectAgreement(const char* what, const Capture& capture) {
  OwnUnwinder own;
  // Under qemu-user (the bionic runs) the guest's maps leave out libc.so's code, which the host's
  // view has (ProcessMaps::SetHostViewPid; the daemon reads it as /proc/<pid>/maps, which qemu
  // answers itself when the pid is its own).
  if (MapsAreEmulated()) own.maps.AddMissing(HostViewOfOwnMaps());
  for (int pass = 0; pass < 2; ++pass) {  // cold, then from the frame cache
    UnwindError error;
    std::vector<uint64_t> pcs =
        UnwindCapture(&own.unwinder, &own.maps, own.maps_fd, own.mem_fd, capture, &error);
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
  CHECK(own.unwinder.stats().frame_hits > 0);
  CHECK(own.unwinder.stats().cfi_frames > 0);
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

// A sample with no stack copy whose frame pointer leads into a chain of `frames` frame records
// in this process's memory, `stride` bytes apart, every return address in the chain's own
// anonymous mapping (no unwind table there: frame pointers are followed), as a hostile client
// sends it (issue 41). Unwound through /proc/self/mem by a RemoteMemory.
UnwindResult UnwindChain(size_t frames, size_t stride, RemoteMemory* remote) {
  const size_t bytes = (frames + 1) * stride + 4096;
  auto* chain = static_cast<uint8_t*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  CHECK(chain != MAP_FAILED);
  const uint64_t base = reinterpret_cast<uintptr_t>(chain);
  const uint64_t pc = base + bytes - 64;
  for (size_t i = 0; i < frames; ++i) {
    const uintptr_t record[2] = {  // in this process's words
        static_cast<uintptr_t>(i + 1 < frames ? base + (i + 1) * stride : 0),
        static_cast<uintptr_t>(pc + 8)};
    memcpy(chain + i * stride, record, sizeof(record));
  }
  OwnUnwinder own;
  uint64_t regs[kMaxRegisters] = {};
  regs[kRegSp] = base;
  regs[kRegFp] = base;
  regs[kRegPc] = pc;
  remote->Begin(own.mem_fd);
  StackMemory memory(base, nullptr, 0, remote);
  UnwindResult result;
  own.unwinder.Unwind(kNativeLayout, regs, 0, memory, &own.maps, own.maps_fd, 256, &result);
  munmap(chain, bytes);
  return result;
}

void TestChainInProcessMemoryIsReadByTheBlock() {
  constexpr size_t kRecord = 2 * sizeof(uintptr_t);
  RemoteMemory remote;
  // 300 records packed in a block or two: followed to the frame limit, at most two reads of the
  // process where a word at a time took two per frame.
  UnwindResult packed = UnwindChain(300, kRecord, &remote);
  CHECK(packed.error == UnwindError::kMaxFrames);
  CHECK(packed.pcs.size() == 256);
  CHECK(remote.reads() <= 2);
  printf("a 300-frame chain outside the copy: %u reads of /proc/self/mem for %zu frames (a word "
         "at a time: %zu)\n", remote.reads(), packed.pcs.size(), 2 * (packed.pcs.size() - 1));
  // One record per page: the unwind ends where its reads are spent.
  UnwindResult spread = UnwindChain(300, 4096 + kRecord, &remote);
  CHECK(spread.error == UnwindError::kMemoryInvalid);
  CHECK(remote.exhausted() && remote.reads() == RemoteMemory::kMaxReads);
  CHECK(spread.pcs.size() <= RemoteMemory::kMaxReads + 1);
}

void TestRemoteMemoryReadsWordsAcrossBlocksAndRemembersFailures() {
  const uint64_t words[2] = {0x1122334455667788ull, 0x99aabbccddeeff00ull};
  // A word across a block boundary, from a copy of `words` laid over one.
  auto* page = static_cast<uint8_t*>(
      mmap(nullptr, 2 * RemoteMemory::kBlockSize, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  CHECK(page != MAP_FAILED);
  uint8_t* boundary = page + RemoteMemory::kBlockSize;
  memcpy(boundary - 4, words, sizeof(words));
  int mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  CHECK(mem_fd >= 0);
  RemoteMemory remote;
  remote.Begin(mem_fd);
  uint64_t value = 0;
  CHECK(remote.ReadWord(reinterpret_cast<uintptr_t>(boundary - 4), 8, &value));
  uint64_t expected;
  memcpy(&expected, boundary - 4, 8);
  CHECK(value == expected);
  CHECK(remote.ReadWord(reinterpret_cast<uintptr_t>(boundary + 4), 4, &value));
  uint32_t narrow;
  memcpy(&narrow, boundary + 4, 4);
  CHECK(value == narrow);
  CHECK(remote.reads() == 2);  // the second word came from a block kept
  // Unmapped: read once, then known to fail.
  munmap(page, 2 * RemoteMemory::kBlockSize);
  remote.Begin(mem_fd);
  CHECK(!remote.ReadWord(reinterpret_cast<uintptr_t>(page), 8, &value));
  CHECK(!remote.ReadWord(reinterpret_cast<uintptr_t>(page) + 8, 8, &value));
  CHECK(remote.reads() == 1);
  // No fd: nothing is read.
  remote.Begin(-1);
  CHECK(!remote.ReadWord(reinterpret_cast<uintptr_t>(&value), 8, &value));
  CHECK(remote.reads() == 0);
  close(mem_fd);
}

}  // namespace

// Whether /proc/self/mem shows this process's memory at its own addresses: not under qemu-user
// when it maps the guest away from the host's addresses (armeabi-v7a's 32-bit guest on a 64-bit
// host), where the file is the emulator's own memory.
bool OwnMemoryIsAtItsAddresses() {
  static const uint64_t probe = 0x6d656d6f72792121ull;
  int mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  CHECK(mem_fd >= 0);
  uint64_t seen = 0;
  const bool same = pread(mem_fd, &seen, sizeof(seen), static_cast<off_t>(
                              reinterpret_cast<uintptr_t>(&probe))) == sizeof(seen) &&
                    seen == probe;
  close(mem_fd);
  return same;
}

int main() {
  TestDeepRecursion();
  TestQsortCallback();
  TestLibstdcxx();
  TestThread();
  TestGarbageRegistersFailCleanly();
  if (OwnMemoryIsAtItsAddresses()) {
    TestChainInProcessMemoryIsReadByTheBlock();
    TestRemoteMemoryReadsWordsAcrossBlocksAndRemembersFailures();
  } else {
    printf("the cases reading /proc/self/mem skipped: it is not this process's memory at its "
           "addresses here (qemu-user with a guest base)\n");
  }
  printf("dwarf_unwinder_test: ok\n");
  return 0;
}

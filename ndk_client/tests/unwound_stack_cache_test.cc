// The cache of unwound stacks (daemon/unwound_stack_cache.h) against the unwinder itself: a stack
// that repeats what an earlier unwind read is found, and every stack it finds unwinds, afresh, to
// the very frames it was kept with. Each word of a captured stack and each register is changed in
// turn: found or not, the cache must never answer for a stack that unwinds differently.
#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "daemon/unwound_stack_cache.h"
#include "tests/stack_capture.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_unwinder.h"

using namespace droidheap;
using namespace droidheap::stack_capture;

namespace {

struct Unwound {
  std::vector<uint64_t> pcs;
  UnwindError error;
};

class Fixture {
 public:
  Fixture() {
    maps_fd_ = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    mem_fd_ = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    CHECK(maps_fd_ >= 0 && mem_fd_ >= 0);
    CHECK(maps_.Reload(maps_fd_));
  }
  ~Fixture() {
    close(maps_fd_);
    close(mem_fd_);
  }

  // Unwinds `regs` over `stack` (copied from `capture`'s sp); with `cache`, keeps the result as
  // `callstack` when the unwind can be kept.
  Unwound Unwind(const uint64_t* regs, const std::vector<uint8_t>& stack, uint64_t stack_top,
                 UnwoundStackCache* cache = nullptr, uint32_t callstack = 0) {
    StackMemory memory(regs[kRegSp], stack.data(), stack.size(), mem_fd_);
    UnwindInputs inputs;
    UnwindResult result;
    memory.RecordReads(&inputs.words);
    unwinder_.Unwind(kNativeLayout, regs, stack_top, memory, &maps_, maps_fd_, 512, &result,
                     &inputs);
    memory.RecordReads(nullptr);
    if (cache != nullptr) {
      UnwoundStackCache::Entry* kept =
          cache->Keep(kNativeLayout, regs, stack_top, maps_.generation(), inputs);
      CHECK(kept != nullptr);  // a captured stack unwinds with CFI offsets alone
      kept->callstack = callstack;
    }
    return {result.pcs, result.error};
  }

  const UnwoundStackCache::Entry* Find(UnwoundStackCache* cache, const uint64_t* regs,
                                       const std::vector<uint8_t>& stack, uint64_t stack_top) {
    StackMemory memory(regs[kRegSp], stack.data(), stack.size(), mem_fd_);
    return cache->Find(kNativeLayout, regs, stack_top, memory, maps_.generation());
  }

  uint64_t maps_generation() const { return maps_.generation(); }

 private:
  int maps_fd_ = -1;
  int mem_fd_ = -1;
  ElfCache elf_cache_;
  DwarfUnwinder unwinder_{&elf_cache_};
  ProcessMaps maps_;
};

void TestARepeatedStackIsFound() {
  Capture capture;
  Recurse(12, &capture);
  Fixture fixture;
  UnwoundStackCache cache;
  CHECK(fixture.Find(&cache, capture.regs, capture.stack, capture.stack_top) == nullptr);
  Unwound first = fixture.Unwind(capture.regs, capture.stack, capture.stack_top, &cache, 7);
  CHECK(first.error == UnwindError::kNone && first.pcs.size() > 12);
  const UnwoundStackCache::Entry* found =
      fixture.Find(&cache, capture.regs, capture.stack, capture.stack_top);
  CHECK(found != nullptr && found->callstack == 7);
  CHECK(cache.hits() == 1);
  // Found for the maps it was unwound with only.
  StackMemory memory(capture.regs[kRegSp], capture.stack.data(), capture.stack.size(), -1);
  CHECK(cache.Find(kNativeLayout, capture.regs, capture.stack_top, memory,
                   fixture.maps_generation() + 1) == nullptr);
}

// Every word of the copy changed in turn (to a value that is no address: the unwind then fails
// or goes elsewhere when it reads it): where the cache still finds the stack, a fresh unwind of
// it gives the same frames; some words matter (return addresses), most do not (locals).
void TestNoChangedStackIsFoundThatUnwindsDifferently() {
  Capture capture;
  Recurse(12, &capture);
  Fixture fixture;
  UnwoundStackCache cache;
  const Unwound kept = fixture.Unwind(capture.regs, capture.stack, capture.stack_top, &cache, 1);
  size_t found = 0, missed = 0;
  std::vector<uint8_t> changed = capture.stack;
  for (size_t offset = 0; offset + 8 <= changed.size(); offset += 8) {
    uint64_t saved;
    memcpy(&saved, &changed[offset], 8);
    const uint64_t other = saved ^ 0x5a5a5a5a5a5a5a5aull;
    memcpy(&changed[offset], &other, 8);
    if (fixture.Find(&cache, capture.regs, changed, capture.stack_top) != nullptr) {
      ++found;
      Unwound fresh = fixture.Unwind(capture.regs, changed, capture.stack_top);
      CHECK(fresh.pcs == kept.pcs && fresh.error == kept.error);
    } else {
      ++missed;
    }
    memcpy(&changed[offset], &saved, 8);
  }
  CHECK(found > 0 && missed >= 12);  // at least each frame's return address mattered
  // Each register likewise: the few the unwind read (pc, sp, at most the frame pointer and the
  // link register) matter, the rest do not.
  size_t registers_that_mattered = 0;
  for (int reg = 0; reg < kMaxRegisters; ++reg) {
    uint64_t regs[kMaxRegisters];
    memcpy(regs, capture.regs, sizeof(regs));
    regs[reg] ^= 0x5a5a5a5a5a5a5a5aull;
    if (fixture.Find(&cache, regs, capture.stack, capture.stack_top) != nullptr) {
      Unwound fresh = fixture.Unwind(regs, capture.stack, capture.stack_top);
      CHECK(fresh.pcs == kept.pcs && fresh.error == kept.error);
    } else {
      ++registers_that_mattered;
    }
  }
  CHECK(registers_that_mattered >= 2 && registers_that_mattered <= 4);
}

// A stack deeper than its copy (the client copies 64 KiB at most): the unwind reads on in the
// process, and the words it used there are inputs as the copy's are. Kept, found again while they
// hold the same, from the process or from a longer copy; not found once one of them differs.
void TestAStackPastItsCopyIsKeptWithTheWordsReadInTheProcess() {
  volatile uint64_t here = 0;  // this frame's, below its saved registers and return address
  Capture capture;
  Recurse(12, &capture);
  const uint64_t sp = capture.regs[kRegSp];
  // The copy ends in this frame: what lies above it is the same in the process as in the capture.
  const size_t cut = (reinterpret_cast<uintptr_t>(&here) - sp) & ~size_t{7};
  CHECK(cut < capture.stack.size());
  const std::vector<uint8_t> copy(capture.stack.begin(), capture.stack.begin() + cut);
  Fixture fixture;
  UnwoundStackCache cache;
  const Unwound whole = fixture.Unwind(capture.regs, capture.stack, 0);
  const Unwound past = fixture.Unwind(capture.regs, copy, 0, &cache, 5);  // kept (checked there)
  CHECK(past.error == whole.error && past.pcs == whole.pcs);
  const UnwoundStackCache::Entry* found = fixture.Find(&cache, capture.regs, copy, 0);
  CHECK(found != nullptr && found->callstack == 5);
  std::vector<uint64_t> in_process;
  for (const WordRead& word : found->words) {
    if (word.address >= sp + cut) in_process.push_back(word.address);
  }
  CHECK(!in_process.empty());  // at least this frame's return address
  // The same words from a longer copy: found; one of them changed there: not.
  std::vector<uint8_t> longer = capture.stack;
  CHECK(fixture.Find(&cache, capture.regs, longer, 0) == found);
  const size_t offset = static_cast<size_t>(in_process.back() - sp);
  longer[offset] ^= 0x5a;
  CHECK(fixture.Find(&cache, capture.regs, longer, 0) == nullptr);
  (void)here;
}

// Stacks at the same pc and sp but different callers (a set of several ways) are told apart.
void TestTwoCallersAtOneDepthAreToldApart() {
  Capture through_recursion, through_qsort;
  Recurse(3, &through_recursion);
  ThroughQsort(&through_qsort);
  Fixture fixture;
  UnwoundStackCache cache;
  fixture.Unwind(through_recursion.regs, through_recursion.stack, through_recursion.stack_top,
                 &cache, 1);
  fixture.Unwind(through_qsort.regs, through_qsort.stack, through_qsort.stack_top, &cache, 2);
  const UnwoundStackCache::Entry* first = fixture.Find(
      &cache, through_recursion.regs, through_recursion.stack, through_recursion.stack_top);
  const UnwoundStackCache::Entry* second =
      fixture.Find(&cache, through_qsort.regs, through_qsort.stack, through_qsort.stack_top);
  CHECK(first != nullptr && first->callstack == 1);
  CHECK(second != nullptr && second->callstack == 2);
  CHECK(cache.memory_bytes() > 0);
}

// Registers and an empty stack copy for entries kept without an unwind: the inputs say what was
// used, the cache keeps them as they are.
struct FakeStack {
  FakeStack() {
    regs[kRegSp] = 0x7fff0000;
    regs[kNativeLayout.pc] = 0x400000;
    inputs.Begin();
    inputs.Use(static_cast<uint32_t>(kNativeLayout.pc));
  }
  uint64_t regs[kMaxRegisters] = {};
  std::vector<uint8_t> copy = std::vector<uint8_t>(64);
  StackMemory memory{0x7fff0000, copy.data(), copy.size(), -1};
  UnwindInputs inputs;
};

// Many call paths: the cache grows to its largest, then replaces its least recently used entries;
// what it takes stays bounded, and what was kept last is found.
void TestManyCallPathsStayBounded() {
  UnwoundStackCache cache;
  FakeStack stack;
  stack.inputs.Use(static_cast<uint32_t>(kRegSp));
  size_t first_bytes = 0;
  for (uint32_t path = 1; path <= 20000; ++path) {
    stack.regs[kNativeLayout.pc] = 0x400000 + 16 * uint64_t{path};
    UnwoundStackCache::Entry* kept =
        cache.Keep(kNativeLayout, stack.regs, 0, 1, stack.inputs);
    CHECK(kept != nullptr);
    kept->callstack = path;
    if (path == 1) first_bytes = cache.memory_bytes();
    CHECK(cache.Find(kNativeLayout, stack.regs, 0, stack.memory, 1)->callstack == path);
  }
  CHECK(first_bytes < 16 * 1024);  // a process with a few call paths takes little
  CHECK(cache.memory_bytes() < 512 * 1024);
}

// A step that ends before it reads the words it was to read (a frame pointer off the stack, an
// undefined return address) leaves their indices in the inputs with no word behind them: the
// result did not depend on them (found by the records fuzzer: an index past the words read).
void TestAWordNeverReadIsNoInput() {
  UnwoundStackCache cache;
  FakeStack stack;
  stack.inputs.Set(static_cast<uint32_t>(kRegFp), 0);  // to come from the first word read
  stack.inputs.Use(static_cast<uint32_t>(kRegFp));
  UnwoundStackCache::Entry* kept =
      cache.Keep(kNativeLayout, stack.regs, 0, 1, stack.inputs);
  CHECK(kept != nullptr && kept->words.empty());
  CHECK(cache.Find(kNativeLayout, stack.regs, 0, stack.memory, 1) == kept);
}

}  // namespace

int main() {
  TestARepeatedStackIsFound();
  TestNoChangedStackIsFoundThatUnwindsDifferently();
  TestTwoCallersAtOneDepthAreToldApart();
  TestAStackPastItsCopyIsKeptWithTheWordsReadInTheProcess();
  TestManyCallPathsStayBounded();
  TestAWordNeverReadIsNoInput();
  printf("unwound_stack_cache_test: ok\n");
  return 0;
}

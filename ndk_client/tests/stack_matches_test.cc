// StackMatches: a client matches a published entry only when every register and stack word it
// names holds the same value, never reads outside the stack it is given whatever a slot says, stops
// matching what was withdrawn, and never takes an entry while the daemon rewrites its slot.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "protocol/stack_matches.h"
#include "tests/test_util.h"

using droidheap::StackMatches;
using droidheap::StackMatchSlot;

namespace {

// A stack of this process's words and what a client captured with it: register 0 is "pc", 1 "sp".
struct FakeSample {
  uintptr_t stack[64] = {};
  uint64_t captured[3] = {};
  uint64_t sp() const { return reinterpret_cast<uintptr_t>(stack); }
  uint64_t size() const { return sizeof(stack); }
  uint64_t top() const { return sp() + size(); }
};

FakeSample NewSample(uint64_t pc, uintptr_t seed) {
  FakeSample sample;
  for (size_t i = 0; i < 64; ++i) sample.stack[i] = seed + i;
  sample.captured[0] = pc;
  sample.captured[1] = sample.sp();
  sample.captured[2] = 0x5555;  // a register the entries do not name
  return sample;
}

// Publishes `sample` as entry `id`, naming pc, sp and the stack words at `indexes`.
void PublishSample(StackMatches* matches, uint64_t id, const FakeSample& sample,
                   const std::vector<size_t>& indexes) {
  const uint8_t slots[2] = {0, 1};
  const uint64_t values[2] = {sample.captured[0], sample.captured[1]};
  std::vector<uint64_t> addresses, words;
  for (size_t i : indexes) {
    addresses.push_back(reinterpret_cast<uintptr_t>(&sample.stack[i]));
    words.push_back(sample.stack[i]);
  }
  matches->Publish(id, sample.sp(), sample.top(), 2, slots, values, indexes.size(),
                   addresses.data(), words.data());
}

uint64_t MatchSample(const StackMatches& matches, const FakeSample& sample) {
  return matches.Match(sample.captured, 3, sample.sp(), sample.size(), sample.top());
}

void TestOnlyTheSameValuesMatch() {
  std::unique_ptr<StackMatches, StackMatches::Deleter> matches(StackMatches::Create());
  CHECK(matches);
  FakeSample sample = NewSample(0x401000, 0x7000);
  CHECK(MatchSample(*matches, sample) == StackMatches::kNoMatch);  // nothing published yet
  PublishSample(matches.get(), 7, sample, {1, 5, 63});
  CHECK(matches->Holds(sample.sp(), sample.top(), 7));
  CHECK(MatchSample(*matches, sample) == 7);
  // A word the entry did not read may differ; one it read may not.
  sample.stack[2] = 1;
  CHECK(MatchSample(*matches, sample) == 7);
  sample.stack[63] = 1;
  CHECK(MatchSample(*matches, sample) == StackMatches::kNoMatch);
  sample.stack[63] = 0x7000 + 63;
  // Nor may a register it read, nor the stack's top.
  sample.captured[0] = 0x401004;
  CHECK(MatchSample(*matches, sample) == StackMatches::kNoMatch);
  sample.captured[0] = 0x401000;
  CHECK(matches->Match(sample.captured, 3, sample.sp(), sample.size(), 0) ==
        StackMatches::kNoMatch);
  CHECK(MatchSample(*matches, sample) == 7);
  // Withdrawn (the maps changed): nothing matches until published again.
  matches->Withdraw();
  CHECK(!matches->Holds(sample.sp(), sample.top(), 7));
  CHECK(MatchSample(*matches, sample) == StackMatches::kNoMatch);
  PublishSample(matches.get(), 8, sample, {1, 5, 63});
  CHECK(MatchSample(*matches, sample) == 8);
}

// A slot naming words outside the sample's stack (a shorter stack at the same sp and top is not
// possible, but a torn read of a slot is): no match, and nothing read there.
void TestWordsOutsideTheStackAreNotRead() {
  std::unique_ptr<StackMatches, StackMatches::Deleter> matches(StackMatches::Create());
  FakeSample sample = NewSample(0x401000, 0x9000);
  const long page = sysconf(_SC_PAGESIZE);
  void* guard = mmap(nullptr, static_cast<size_t>(page), PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(guard != MAP_FAILED);
  const uint8_t slots[2] = {0, 1};
  const uint64_t values[2] = {sample.captured[0], sample.captured[1]};
  for (uint64_t address : {uint64_t{reinterpret_cast<uintptr_t>(guard)}, sample.sp() - 8,
                           sample.top() - sizeof(uintptr_t) + 1, sample.top()}) {
    const uint64_t word = 0;
    matches->Publish(1, sample.sp(), sample.top(), 2, slots, values, 1, &address, &word);
    CHECK(MatchSample(*matches, sample) == StackMatches::kNoMatch);
  }
  munmap(guard, static_cast<size_t>(page));
}

// The daemon rewrites one slot over and over with two entries of the same sp and top, one whose
// words this client's stack holds (even ids) and one whose words it does not (odd ids): the client
// may miss, but never takes an odd id.
void TestARewrittenSlotIsNeverHalfMatched() {
  std::unique_ptr<StackMatches, StackMatches::Deleter> matches(StackMatches::Create());
  FakeSample sample = NewSample(0x401000, 0x1000);
  FakeSample other = sample;
  for (uintptr_t& word : other.stack) word += 0x100000;
  std::atomic<bool> stop{false};
  std::vector<size_t> every_word(64);
  for (size_t i = 0; i < 64; ++i) every_word[i] = i;
  PublishSample(matches.get(), 0, sample, every_word);
  CHECK(MatchSample(*matches, sample) == 0);
  std::thread daemon([&] {
    for (uint64_t id = 2; !stop.load(std::memory_order_relaxed); ++id) {
      // `other`'s words at `sample`'s addresses: same slot, other values.
      const FakeSample& published = id % 2 == 0 ? sample : other;
      const uint8_t slots[2] = {0, 1};
      const uint64_t values[2] = {sample.captured[0], sample.captured[1]};
      uint64_t addresses[64], words[64];
      for (size_t i = 0; i < 64; ++i) {
        addresses[i] = reinterpret_cast<uintptr_t>(&sample.stack[i]);
        words[i] = published.stack[i];
      }
      matches->Publish(id, sample.sp(), sample.top(), 2, slots, values, 64, addresses, words);
      std::this_thread::yield();  // a window for whole reads too
    }
  });
  size_t matched = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t id = MatchSample(*matches, sample);
    if (id == StackMatches::kNoMatch) continue;
    CHECK(id % 2 == 0);
    ++matched;
  }
  stop = true;
  daemon.join();
  printf("stack_matches_test: %zu of 200000 matched while the slot was rewritten\n", matched);
}

}  // namespace

int main() {
  TestOnlyTheSameValuesMatch();
  TestWordsOutsideTheStackAreNotRead();
  TestARewrittenSlotIsNeverHalfMatched();
  printf("stack_matches_test: ok\n");
  return 0;
}

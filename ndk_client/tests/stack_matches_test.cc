// StackMatches: a client matches a published entry only when every register and stack word it
// names holds the same value, never reads outside the stack it is given whatever a slot says, stops
// matching what was withdrawn, keeps two call paths of one sp and stack top (the one the client
// used last when a third comes), and never takes an entry while the daemon rewrites its slot.
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

// Publishes `sample` as entry `id`, naming pc, sp and the stack words at `indexes`; returns the
// slot it went to.
size_t PublishSample(StackMatches* matches, uint64_t id, const FakeSample& sample,
                   const std::vector<size_t>& indexes) {
  const uint8_t slots[2] = {0, 1};
  const uint64_t values[2] = {sample.captured[0], sample.captured[1]};
  std::vector<uint64_t> addresses, words;
  for (size_t i : indexes) {
    addresses.push_back(reinterpret_cast<uintptr_t>(&sample.stack[i]));
    words.push_back(sample.stack[i]);
  }
  return matches->Publish(id, sample.sp(), sample.top(), 2, slots, values, indexes.size(),
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

// A loop's allocation and the one it makes now and then, at the same sp and top (other return
// addresses): both stay published, so that neither costs the other its matches. A third call path
// there replaces the one the client matched least recently.
void TestCallPathsOfOneFrameShareASet() {
  std::unique_ptr<StackMatches, StackMatches::Deleter> matches(StackMatches::Create());
  FakeSample sample = NewSample(0x401000, 0x7000);
  // The return address in the frame above: the loop's, the now-and-then's, a third path's.
  const uintptr_t loop = sample.stack[5], now_and_then = 0x402000, third = 0x403000;
  auto publish = [&](uint64_t id, uintptr_t returns_to) {
    sample.stack[5] = returns_to;
    return PublishSample(matches.get(), id, sample, {1, 5});
  };
  auto match = [&](uintptr_t returns_to) {
    sample.stack[5] = returns_to;
    return MatchSample(*matches, sample);
  };
  const size_t loop_slot = publish(1, loop);
  const size_t other_slot = publish(2, now_and_then);
  CHECK(loop_slot != other_slot);
  CHECK(StackMatches::SetOf(sample.sp(), sample.top()) ==
        loop_slot - loop_slot % StackMatches::kWays);
  CHECK(match(loop) == 1 && match(now_and_then) == 2 && match(third) == StackMatches::kNoMatch);
  CHECK(matches->Holds(sample.sp(), sample.top(), 1));
  CHECK(matches->Holds(sample.sp(), sample.top(), 2));
  // The loop's entry was published first, but the client matched it since.
  matches->Used(loop_slot, 1);
  CHECK(publish(3, third) == other_slot);
  CHECK(match(third) == 3 && match(loop) == 1 && match(now_and_then) == StackMatches::kNoMatch);
  CHECK(!matches->Holds(sample.sp(), sample.top(), 2));
  // A use of an id the slot no longer holds changes nothing: the loop's entry, matched after the
  // third was published, stays the newer.
  matches->Used(loop_slot, 1);
  matches->Used(other_slot, 2);
  CHECK(publish(4, now_and_then) == other_slot);
  CHECK(match(loop) == 1 && match(now_and_then) == 4);
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

// The daemon rewrites the set's slots over and over with two entries of the same sp and top, one
// whose words this client's stack holds and one whose words it does not, each twice in a row so
// that each slot takes one and the other in turn (ids 0, 1, 4, 5, ...: held; 2, 3, 6, 7, ...: not):
// the client may miss, but never takes an id of the other.
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
    for (uint64_t id = 4; !stop.load(std::memory_order_relaxed); ++id) {
      // `other`'s words at `sample`'s addresses: same slots, other values.
      const FakeSample& published = id / 2 % 2 == 0 ? sample : other;
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
    CHECK(id / 2 % 2 == 0);
    ++matched;
  }
  stop = true;
  daemon.join();
  printf("stack_matches_test: %zu of 200000 matched while the slot was rewritten\n", matched);
}

}  // namespace

int main() {
  TestOnlyTheSameValuesMatch();
  TestCallPathsOfOneFrameShareASet();
  TestWordsOutsideTheStackAreNotRead();
  TestARewrittenSlotIsNeverHalfMatched();
  printf("stack_matches_test: ok\n");
  return 0;
}

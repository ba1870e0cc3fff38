// LiveAllocations against std::unordered_map: random inserts, finds and erases of clustered
// addresses (long probe runs, wrap-around at the end of the array, growth), and every entry must
// stay reachable after each backward shift.
#include <stdint.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "daemon/live_allocations.h"
#include "tests/test_util.h"

using droidheap::LiveAllocation;
using droidheap::LiveAllocations;

namespace {

void TestAgreesWithAReferenceMap() {
  LiveAllocations live;
  std::unordered_map<uint64_t, uint64_t> reference;  // address -> sequence
  std::mt19937_64 rng(42);
  uint64_t sequence = 0;
  for (int step = 0; step < 400000; ++step) {
    // Few distinct addresses, 16 bytes apart, so that runs form and wrap around.
    const uint64_t address = 0x7f0000000000 + (rng() % 6000) * 16;
    const int action = static_cast<int>(rng() % 3);
    if (action == 0) {
      auto [entry, inserted] = live.Insert(address, LiveAllocation{++sequence, 1, 0, 16, 1, 16});
      auto ref = reference.emplace(address, sequence);
      CHECK(inserted == ref.second);
      CHECK(entry->sequence == ref.first->second);
    } else if (action == 1) {
      live.Erase(address);
      reference.erase(address);
    } else {
      LiveAllocation* found = live.Find(address);
      auto ref = reference.find(address);
      CHECK((found != nullptr) == (ref != reference.end()));
      if (found != nullptr) CHECK(found->sequence == ref->second);
    }
    CHECK(live.size() == reference.size());
  }
  for (const auto& [address, seq] : reference) {
    LiveAllocation* found = live.Find(address);
    CHECK(found != nullptr && found->sequence == seq);
  }
  CHECK(live.Find(0) == nullptr);
}

void TestEmptyTable() {
  LiveAllocations live;
  CHECK(live.Find(0x1000) == nullptr);
  live.Erase(0x1000);
  CHECK(live.size() == 0);
}

}  // namespace

int main() {
  TestEmptyTable();
  TestAgreesWithAReferenceMap();
  printf("live_allocations_test: ok\n");
  return 0;
}

// SharedTotals: the daemon's sum is every thread's counts, a slot given back serves the next
// thread with its counts kept, threads beyond the slots share slot 0 without losing a count, and
// the client refuses an object of the wrong size.
#include <unistd.h>

#include <memory>
#include <thread>
#include <vector>

#include "protocol/heap_totals.h"
#include "tests/test_util.h"

using droidheap::AddToSlot;
using droidheap::HeapTotals;
using droidheap::SharedTotals;
using droidheap::TotalsSlot;
using Totals = std::unique_ptr<SharedTotals, SharedTotals::Deleter>;

namespace {

void Count(SharedTotals* totals, TotalsSlot* slot, uint64_t allocs, uint64_t bytes) {
  const bool shared = totals->IsShared(slot);
  for (uint64_t i = 0; i < allocs; ++i) {
    AddToSlot(&slot->alloc_count, 1, shared);
    AddToSlot(&slot->alloc_bytes, bytes, shared);
    AddToSlot(&slot->free_count, 1, shared);
    AddToSlot(&slot->free_bytes, bytes, shared);
  }
}

// The client's view: the daemon's object, mapped a second time through its fd.
Totals AttachSecondMapping(const SharedTotals& daemon) {
  const int fd = dup(daemon.fd());
  CHECK(fd >= 0);
  Totals client(SharedTotals::Attach(fd, SharedTotals::kSize));
  CHECK(client != nullptr);
  return client;
}

void TestThreadsAddUp() {
  Totals daemon(SharedTotals::Create());
  CHECK(daemon != nullptr);
  Totals client = AttachSecondMapping(*daemon);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&client] {
      TotalsSlot* slot = client->Claim();
      CHECK(!client->IsShared(slot));
      Count(client.get(), slot, 100000, 24);
      client->Release(slot);
    });
  }
  for (std::thread& t : threads) t.join();
  const HeapTotals sum = daemon->Sum();
  CHECK(sum.alloc_count == 800000 && sum.free_count == 800000);
  CHECK(sum.alloc_bytes == 800000 * 24 && sum.free_bytes == 800000 * 24);
}

void TestReleasedSlotKeepsItsCounts() {
  Totals daemon(SharedTotals::Create());
  Totals client = AttachSecondMapping(*daemon);
  TotalsSlot* first = client->Claim();
  Count(client.get(), first, 3, 10);
  client->Release(first);
  TotalsSlot* next = client->Claim();
  CHECK(next == first);  // the lowest free slot
  Count(client.get(), next, 2, 10);
  CHECK(daemon->Sum().alloc_count == 5 && daemon->Sum().alloc_bytes == 50);
}

void TestThreadsBeyondTheSlotsShare() {
  Totals daemon(SharedTotals::Create());
  Totals client = AttachSecondMapping(*daemon);
  for (uint32_t i = 1; i < SharedTotals::kSlots; ++i) CHECK(!client->IsShared(client->Claim()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&client] {
      TotalsSlot* slot = client->Claim();
      CHECK(client->IsShared(slot));
      Count(client.get(), slot, 100000, 1);
      client->Release(slot);  // the shared slot stays shared
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(daemon->Sum().alloc_count == 400000);
  CHECK(client->IsShared(client->Claim()));
}

void TestAttachRefusesAWrongSize() {
  Totals daemon(SharedTotals::Create());
  CHECK(SharedTotals::Attach(daemon->fd(), SharedTotals::kSize / 2) == nullptr);
  CHECK(SharedTotals::Attach(daemon->fd(), SharedTotals::kSize * 2) == nullptr);
}

}  // namespace

int main() {
  TestThreadsAddUp();
  TestReleasedSlotKeepsItsCounts();
  TestThreadsBeyondTheSlotsShare();
  TestAttachRefusesAWrongSize();
  return 0;
}

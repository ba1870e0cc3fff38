// SharedTotals: the daemon's sum is every thread's counts, a slot given back serves the next
// thread with its counts kept, threads beyond the slots share slot 0 without losing a count, a
// custom heap's counts add up over the rows marked counted in and only those, and the client
// refuses an object of the wrong size.
#include <unistd.h>

#include <memory>
#include <thread>
#include <vector>

#include "protocol/heap_totals.h"
#include "tests/test_util.h"

using droidheap::CountAllocIn;
using droidheap::CountFreeIn;
using droidheap::HeapCounters;
using droidheap::HeapTotals;
using droidheap::SharedTotals;
using droidheap::TotalsSlot;
using Totals = std::unique_ptr<SharedTotals, SharedTotals::Deleter>;

namespace {

void CountIn(HeapCounters* counters, bool shared, uint64_t allocs, uint64_t bytes) {
  for (uint64_t i = 0; i < allocs; ++i) {
    CountAllocIn(counters, bytes, shared);
    CountFreeIn(counters, bytes, shared);
  }
}

void Count(SharedTotals* totals, TotalsSlot* slot, uint64_t allocs, uint64_t bytes) {
  CountIn(&slot->malloc, totals->IsShared(slot), allocs, bytes);
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

void TestCustomHeapsCountInTheirRows() {
  Totals daemon(SharedTotals::Create());
  Totals client = AttachSecondMapping(*daemon);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&client] {
      TotalsSlot* slot = client->Claim();
      SharedTotals::MarkCountsCustom(slot);
      CountIn(&client->custom_row(slot)->heaps[0], false, 1000, 8);
      CountIn(&client->custom_row(slot)->heaps[droidheap::kMaxCustomHeaps - 1], false, 10, 100);
      client->Release(slot);
    });
  }
  for (std::thread& t : threads) t.join();
  // Beyond the slots: the shared row, counted with atomic additions.
  for (uint32_t i = 1; i < SharedTotals::kSlots; ++i) client->Claim();
  TotalsSlot* shared = client->Claim();
  SharedTotals::MarkCountsCustom(shared);
  CountIn(&client->custom_row(shared)->heaps[0], true, 5, 8);
  // A row counted in but never marked is not read (its thread never said so).
  CountIn(&client->custom_row(client->shared_slot() + 100)->heaps[1], false, 7, 7);

  const HeapTotals first = daemon->SumOfCustomHeap(1);
  CHECK(first.alloc_count == 4005 && first.alloc_bytes == 4005 * 8);
  CHECK(first.free_count == 4005 && first.free_bytes == 4005 * 8);
  CHECK(daemon->SumOfCustomHeap(droidheap::kMaxCustomHeaps).alloc_bytes == 4000);
  CHECK(daemon->SumOfCustomHeap(2).alloc_count == 0);
  CHECK(daemon->Sum().alloc_count == 0);  // libc's heap counted apart
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
  TestCustomHeapsCountInTheirRows();
  TestAttachRefusesAWrongSize();
  return 0;
}

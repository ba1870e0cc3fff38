// SampledAddresses: a sampled block's free is always reported, any other free never is (until the
// set overflows, after which every free is), under concurrent inserts and removes, beyond what the
// first table holds too; and with it the ring its allocation was recorded in; and Holds, the free
// hook's second look, answers as Remove does, removing nothing.
#include <sys/mman.h>

#include <atomic>
#include <thread>
#include <vector>

#include "client/sampled_addresses.h"
#include "tests/test_util.h"

using droidheap::SampledAddresses;
using FirstTable = SampledAddresses::FirstTable;
using LargeTable = SampledAddresses::LargeTable;

namespace {

constexpr size_t kTableBytes = sizeof(SampledAddresses) + sizeof(LargeTable);
constexpr uint64_t kFirstCapacity = FirstTable::kBuckets * FirstTable::kSlotsPerBucket;
constexpr uint64_t kLargeCapacity = LargeTable::kBuckets * LargeTable::kSlotsPerBucket;

// As the client makes it: fresh zero pages, with room for the large table after the set.
SampledAddresses* NewTable(bool large_table = true) {
  void* memory = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(memory != MAP_FAILED);
  auto* table = static_cast<SampledAddresses*>(memory);
  if (large_table) table->SetLargeTableRoom(reinterpret_cast<LargeTable*>(table + 1));
  return table;
}

void FreeTable(SampledAddresses* table) { munmap(table, kTableBytes); }

// Every removal is asked first as the free hook asks (Holds): the same answer, nothing removed.
bool Removed(SampledAddresses* table, uint64_t address) {
  const bool held = table->Holds(address);
  CHECK(table->Holds(address) == held);
  uint32_t ring;
  const bool removed = table->Remove(address, &ring);
  CHECK(held == removed);
  return removed;
}

void TestOnlySampledFreesAreReported() {
  SampledAddresses* t = NewTable();
  CHECK(!t->reports_every_free());
  CHECK(!t->MayHold(0x1000));  // the hooks' first look: nothing there yet
  CHECK(t->Insert(0x1000));
  CHECK(t->MayHold(0x1000));
  CHECK(Removed(t, 0x1000));
  CHECK(!t->MayHold(0x1000));
  CHECK(t->Insert(0x1000));
  CHECK(t->Insert(0x2010));
  CHECK(!Removed(t, 0x3000));  // never sampled
  CHECK(Removed(t, 0x1000));
  CHECK(!Removed(t, 0x1000));  // reported once: the block is gone
  CHECK(Removed(t, 0x2010));
  CHECK(t->Insert(0x1000));   // the address is reused by a new sampled block
  CHECK(Removed(t, 0x1000));
  FreeTable(t);
}

// Far more addresses than one bucket holds, many sharing their first bucket: those spill into
// their second bucket and are still found, and removing them leaves nothing behind.
void TestCrowdedBucketsSpillAndAreFound() {
  SampledAddresses* t = NewTable();
  std::vector<uint64_t> live;
  for (uint64_t i = 1; i <= 30000; ++i) {
    const uint64_t address = 0x7f0000000000 + i * 48;
    CHECK(t->Insert(address));
    live.push_back(address);
  }
  CHECK(!t->reports_every_free());
  for (uint64_t i = 1; i <= 30000; ++i) CHECK(!Removed(t, 0x6f0000000000 + i * 48));
  for (uint64_t address : live) CHECK(Removed(t, address));
  for (uint64_t address : live) CHECK(!Removed(t, address));
  FreeTable(t);
}

// With many sampled blocks live (tens of thousands in a big program), a free of any other block
// must still mostly stop at its home's word: the homes outnumber the buckets eight to one, and a
// home with one address lets through only the frees of its fingerprint. 5000 live blocks leave
// ~7% of the homes counted, 0.3% with two addresses or more; 20000 (perl's hash) 26% and 4%.
void TestTheCountsStayAFilterWithManyLiveBlocks() {
  for (uint64_t live : {5000, 20000}) {
    SampledAddresses* t = NewTable();
    for (uint64_t i = 1; i <= live; ++i) CHECK(t->Insert(0x7f0000000000 + i * 4096 + 32));
    size_t may_hold = 0;
    for (uint64_t i = 1; i <= 100000; ++i) may_hold += t->MayHold(0x5a0000000000 + i * 80);
    CHECK(may_hold < (live == 5000 ? 100000 / 100 : 100000 * 6 / 100));
    for (uint64_t i = 1; i <= live; ++i) CHECK(t->MayHold(0x7f0000000000 + i * 4096 + 32));
    FreeTable(t);
  }
}

// A home counts 15 addresses at most: the 16th of one home is refused, as when its buckets are
// full, and the set moves to its large table, where every one is still found.
void TestAHomeCountsFifteenAddressesAtMost() {
  SampledAddresses* t = NewTable();
  std::vector<uint64_t> same_home;
  for (uint64_t a = 0x10; same_home.size() < 40; a += 8) {
    if (FirstTable::Home(a) == FirstTable::Home(0x10)) same_home.push_back(a);
  }
  for (uint64_t address : same_home) CHECK(t->Insert(address));
  CHECK(!t->reports_every_free() && !t->full());
  for (uint64_t address : same_home) CHECK(Removed(t, address));
  for (uint64_t address : same_home) CHECK(!Removed(t, address));
  FreeTable(t);
}

// Three times the addresses the first table holds: the set moves to its large table, every one
// is found, those left in the first table too, and the frees of blocks never sampled are still
// not reported.
void TestAFullFirstTableMovesToTheLargeTable() {
  SampledAddresses* t = NewTable();
  std::vector<uint64_t> live;
  for (uint64_t i = 1; i <= 3 * kFirstCapacity; ++i) {
    const uint64_t address = 0x7f0000000000 + i * 48;
    CHECK(t->Insert(address));
    live.push_back(address);
  }
  CHECK(!t->reports_every_free() && !t->full());
  for (uint64_t i = 1; i <= 100000; ++i) CHECK(!Removed(t, 0x5a0000000000 + i * 80));
  for (uint64_t address : live) CHECK(Removed(t, address));
  for (uint64_t address : live) CHECK(!Removed(t, address));
  FreeTable(t);
}

// A set filled past what two buckets per address can hold, in both its tables, overflows, and from
// then on reports every free, including those of blocks it never held; without a large table,
// once the first is full.
void TestOverflowReportsEveryFree() {
  for (bool large_table : {true, false}) {
    SampledAddresses* t = NewTable(large_table);
    const uint64_t capacity = kFirstCapacity + (large_table ? kLargeCapacity : 0);
    uint64_t inserted = 0;
    while (t->Insert(0x10000 + inserted * 16)) ++inserted;
    CHECK(t->reports_every_free());
    CHECK(inserted > capacity / 2 && inserted < capacity);
    CHECK(!t->Insert(0x20));
    CHECK(t->MayHold(0x30) && t->MayHold(0x7f0000001230));  // the hooks' look says "maybe"
    CHECK(Removed(t, 0x30));
    CHECK(Removed(t, 0x10000));
    CHECK(Removed(t, 0x10000 + (inserted - 1) * 16));
    FreeTable(t);
  }

  SampledAddresses* t = NewTable();
  t->ReportEveryFree();
  CHECK(t->MayHold(0x40));
  CHECK(Removed(t, 0x40));
  FreeTable(t);
}

// libc's table keeps each block's ring (Client::RingOf) and gives it back with its free; a block
// it could not hold after overflowing went to ring 0. A table without rings (the custom heaps')
// keeps keys apart that differ in their low bits.
void TestRingsAreKeptWithTheirBlocks() {
  SampledAddresses* t = NewTable();
  t->KeepRings();
  uint32_t ring = 99;
  CHECK(t->Insert(0x1000, 5) && t->Insert(0x1008, 0) && t->Insert(0x2000, 7));
  CHECK(!t->Remove(0x3000, &ring) && ring == 0);
  CHECK(t->Remove(0x2000, &ring) && ring == 7);
  CHECK(t->Remove(0x1000, &ring) && ring == 5);
  CHECK(!t->Remove(0x1000, &ring));
  CHECK(t->Remove(0x1008, &ring) && ring == 0);
  CHECK(t->Insert(0x4000, 3));
  uint64_t inserted = 0;
  while (t->Insert(0x10000 + inserted * 16, 1 + inserted % 7)) ++inserted;
  CHECK(t->reports_every_free() && t->full());
  CHECK(t->Remove(0x4000, &ring) && ring == 3);  // held from before
  CHECK(t->Remove(0x10000, &ring) && ring == 1);
  for (uint64_t i = kFirstCapacity; i < inserted; i += 997) {  // in the large table
    CHECK(t->Remove(0x10000 + i * 16, &ring) && ring == 1 + i % 7);
  }
  CHECK(t->Remove(0x30, &ring) && ring == 0);  // never held: reported, in ring 0
  FreeTable(t);

  t = NewTable();
  CHECK(t->Insert(0x1001) && t->Insert(0x1000));
  CHECK(t->Remove(0x1001, &ring) && ring == 0);
  CHECK(!t->Remove(0x1001, &ring) && t->Remove(0x1000, &ring));
  FreeTable(t);
}

// At -i 1 every free is reported from the start: the table holds the blocks of rings other than
// 0 alone, so that their frees follow them; a block of ring 0, or one it does not hold, is
// reported in ring 0.
void TestAtIntervalOneOnlyOtherRingsAreHeld() {
  SampledAddresses* t = NewTable();
  t->KeepRings();
  t->ReportEveryFree();
  uint32_t ring = 99;
  CHECK(!t->Insert(0x1000, 0));  // not held: its free is reported all the same
  CHECK(t->Insert(0x2000, 3) && t->Insert(0x2008, 6));
  CHECK(t->MayHold(0x1000) && t->Holds(0x1000));
  CHECK(t->Remove(0x1000, &ring) && ring == 0);
  CHECK(t->Remove(0x2008, &ring) && ring == 6);
  CHECK(t->Remove(0x2000, &ring) && ring == 3);
  CHECK(t->Remove(0x2000, &ring) && ring == 0);  // gone from the table, reported in ring 0
  CHECK(!t->full());
  FreeTable(t);
}

// Threads insert and remove their own addresses while others do the same in the same buckets:
// each thread must find exactly its live addresses, and never another's; with more of them live
// than the first table holds, too.
void TestConcurrentThreadsSeeExactlyTheirOwnBlocks(uint64_t live, int rounds) {
  SampledAddresses* t = NewTable();
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([t, id, live, rounds, &failures] {
      // Interleaved addresses: neighbours of other threads' blocks share buckets with ours.
      auto address = [id](uint64_t i) { return 0x550000000000 + (i * kThreads + id) * 16; };
      for (int round = 0; round < rounds; ++round) {
        for (uint64_t i = 0; i < live; ++i) {
          if (!t->Insert(address(i))) failures.fetch_add(1);
        }
        for (uint64_t i = 0; i < live; ++i) {
          if (!Removed(t, address(i))) failures.fetch_add(1);
          if (Removed(t, address(i))) failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  CHECK(!t->reports_every_free());
  FreeTable(t);
}

}  // namespace

int main() {
  TestOnlySampledFreesAreReported();
  TestCrowdedBucketsSpillAndAreFound();
  TestTheCountsStayAFilterWithManyLiveBlocks();
  TestAHomeCountsFifteenAddressesAtMost();
  TestAFullFirstTableMovesToTheLargeTable();
  TestOverflowReportsEveryFree();
  TestRingsAreKeptWithTheirBlocks();
  TestAtIntervalOneOnlyOtherRingsAreHeld();
  TestConcurrentThreadsSeeExactlyTheirOwnBlocks(2000, 50);
  TestConcurrentThreadsSeeExactlyTheirOwnBlocks(30000, 4);
  printf("sampled_addresses_test: ok\n");
  return 0;
}

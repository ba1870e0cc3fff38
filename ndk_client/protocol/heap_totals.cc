#include "protocol/heap_totals.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "protocol/shared_memory.h"

namespace droidheap {

SharedTotals* SharedTotals::Map(int fd) {
  void* base = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return nullptr;
  // As in SharedRingBuffer::Map: the client attaches before its hooks are installed, so this
  // allocation goes to the previous allocator.
  void* storage = malloc(sizeof(SharedTotals));
  if (storage == nullptr) {
    munmap(base, kSize);
    return nullptr;
  }
  return new (storage) SharedTotals(fd, static_cast<TotalsSlot*>(base));
}

SharedTotals* SharedTotals::Create() {
  int fd = CreateSealedMemory("droidheap_totals", kSize);
  if (fd < 0) return nullptr;
  SharedTotals* totals = Map(fd);
  if (totals == nullptr) close(fd);
  return totals;
}

SharedTotals* SharedTotals::Attach(int fd, uint64_t size) {
  if (size != kSize || !IsSealedMemory(fd, size)) return nullptr;
  return Map(fd);
}

void SharedTotals::Destroy(SharedTotals* totals) {
  if (totals == nullptr) return;
  munmap(totals->slots_, kSize);
  if (totals->fd_ >= 0) close(totals->fd_);
  totals->~SharedTotals();
  free(totals);
}

TotalsSlot* SharedTotals::Claim() {
  for (uint32_t i = 1; i < kSlots; ++i) {
    uint32_t free_slot = 0;
    if (slots_[i].taken.load(std::memory_order_relaxed) == 0 &&
        slots_[i].taken.compare_exchange_strong(free_slot, 1, std::memory_order_acquire)) {
      return &slots_[i];
    }
  }
  return slots_;
}

void SharedTotals::Release(TotalsSlot* slot) {
  // Release: the next thread to take the slot adds to what this one stored last.
  if (!IsShared(slot)) slot->taken.store(0, std::memory_order_release);
}

namespace {

void AddCounters(const HeapCounters& counters, HeapTotals* sum) {
  sum->alloc_count += counters.alloc_count.load(std::memory_order_relaxed);
  sum->alloc_bytes += counters.alloc_bytes.load(std::memory_order_relaxed);
  sum->free_count += counters.free_count.load(std::memory_order_relaxed);
  sum->free_bytes += counters.free_bytes.load(std::memory_order_relaxed);
}

}  // namespace

HeapTotals SharedTotals::Sum() const {
  HeapTotals sum;
  for (uint32_t i = 0; i < kSlots; ++i) AddCounters(slots_[i].malloc, &sum);
  return sum;
}

HeapTotals SharedTotals::SumOfCustomHeap(uint32_t heap) const {
  HeapTotals sum;
  for (uint32_t i = 0; i < kSlots; ++i) {
    // A row never counted in is never read: its pages stay unallocated.
    if (slots_[i].counts_custom.load(std::memory_order_relaxed) == 0) continue;
    AddCounters(custom_row(&slots_[i])->heaps[heap - 1], &sum);
  }
  return sum;
}

}  // namespace droidheap

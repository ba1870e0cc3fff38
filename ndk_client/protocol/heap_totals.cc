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

HeapTotals SumOfSlots(const TotalsSlot* slots, uint32_t count) {
  HeapTotals sum;
  for (uint32_t i = 0; i < count; ++i) {
    const TotalsSlot& slot = slots[i];
    sum.alloc_count += slot.alloc_count.load(std::memory_order_relaxed);
    sum.alloc_bytes += slot.alloc_bytes.load(std::memory_order_relaxed);
    sum.free_count += slot.free_count.load(std::memory_order_relaxed);
    sum.free_bytes += slot.free_bytes.load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace

HeapTotals SharedTotals::Sum() const { return SumOfSlots(slots_, kSlots); }

HeapTotals SharedTotals::SumOfCustomHeap(uint32_t heap) const {
  return SumOfSlots(custom_heap_slot(heap), 1);
}

}  // namespace droidheap

// The sampled allocations of one process that are still live, by address: what a free record is
// looked up in. Owned by the process's HeapTracker (one unwinding worker thread); not thread-safe.
//
// Open addressing with linear probing over one array (no node per allocation: at -i 1 every
// malloc and free of the program passes through here), grown to keep it at most half full, and
// backward-shift deletion, so that no tombstone ever lengthens a probe. Address 0 marks an empty
// slot: no allocation lives there.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace droidheap {

struct LiveAllocation {
  uint64_t sequence;
  uint32_t callstack;
  uint32_t ring;  // the client's ring it was recorded in (ring_set.h): its key is address ^ ring
  uint64_t size;   // the bytes the sample stands for
  uint64_t count;  // the objects it stands for
  uint64_t block_size;  // the bytes the program asked for: what a pointer into it may point at
};

class LiveAllocations {
 public:
  size_t size() const { return size_; }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(Slot); }

  // The allocation at `address`, or nullptr. Valid until the next Insert or Erase.
  LiveAllocation* Find(uint64_t address) {
    if (address == 0 || slots_.empty()) return nullptr;
    for (size_t i = Home(address);; i = Next(i)) {
      if (slots_[i].address == address) return &slots_[i].live;
      if (slots_[i].address == 0) return nullptr;
    }
  }

  // Adds `live` at `address` and returns it with true; or, when one is there already, returns
  // that one with false (unchanged).
  std::pair<LiveAllocation*, bool> Insert(uint64_t address, const LiveAllocation& live) {
    if ((size_ + 1) * 2 > slots_.size()) Grow();
    size_t i = Home(address);
    for (; slots_[i].address != 0; i = Next(i)) {
      if (slots_[i].address == address) return {&slots_[i].live, false};
    }
    slots_[i] = {address, live};
    ++size_;
    return {&slots_[i].live, true};
  }

  // Calls visit(address, live) for every allocation, in the table's order (the same for two calls
  // with no Insert or Erase between them).
  template <typename Visit>
  void ForEach(Visit visit) const {
    for (const Slot& slot : slots_) {
      if (slot.address != 0) visit(slot.address, slot.live);
    }
  }

  // Removes the allocation at `address`, if any.
  void Erase(uint64_t address) {
    if (address == 0 || slots_.empty()) return;
    size_t hole = Home(address);
    while (slots_[hole].address != address) {
      if (slots_[hole].address == 0) return;
      hole = Next(hole);
    }
    // Backward shift: pull each later entry of the run into the hole when its home allows it, so
    // that every entry stays reachable from its home without passing an empty slot.
    for (size_t i = Next(hole); slots_[i].address != 0; i = Next(i)) {
      const size_t home = Home(slots_[i].address);
      const bool reachable = hole <= i ? (home <= hole || home > i) : (home <= hole && home > i);
      if (reachable) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole].address = 0;
    --size_;
  }

 private:
  struct Slot {
    uint64_t address;
    LiveAllocation live;
  };

  size_t Home(uint64_t address) const {
    return static_cast<size_t>((address * 0x9e3779b97f4a7c15ull) >> 32) & (slots_.size() - 1);
  }
  size_t Next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  void Grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{0, {}});
    size_ = 0;
    for (const Slot& slot : old) {
      if (slot.address != 0) Insert(slot.address, slot.live);
    }
  }

  std::vector<Slot> slots_;  // a power of two in size, at most half full
  size_t size_ = 0;
};

}  // namespace droidheap

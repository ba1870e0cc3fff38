#include "protocol/stack_matches.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "protocol/shared_memory.h"

namespace droidheap {

StackMatches* StackMatches::Map(int fd, int protection) {
  void* base = mmap(nullptr, kSize, protection, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return nullptr;
  // As in SharedRingBuffer::Map: the client attaches before its hooks are installed, so this
  // allocation goes to the previous allocator.
  void* storage = malloc(sizeof(StackMatches));
  if (storage == nullptr) {
    munmap(base, kSize);
    return nullptr;
  }
  return new (storage) StackMatches(fd, static_cast<StackMatchSlot*>(base));
}

StackMatches* StackMatches::Create() {
  int fd = CreateSealedMemory("droidheap_stack_matches", kSize);
  if (fd < 0) return nullptr;
  StackMatches* matches = Map(fd, PROT_READ | PROT_WRITE);
  if (matches == nullptr) close(fd);
  return matches;
}

StackMatches* StackMatches::Attach(int fd, uint64_t size) {
  if (size != kSize || !IsSealedMemory(fd, size)) return nullptr;
  return Map(fd, PROT_READ);
}

void StackMatches::Destroy(StackMatches* matches) {
  if (matches == nullptr) return;
  munmap(matches->slots_, kSize);
  if (matches->fd_ >= 0) close(matches->fd_);
  matches->~StackMatches();
  free(matches);
}

uint64_t StackMatches::BeginWrite(size_t index) {
  uint64_t& sequence = sequences_[index];
  if ((sequence & 1) == 0) {
    ++sequence;
    slots_[index].sequence.store(sequence, std::memory_order_relaxed);
    // The odd sequence is seen before any field written after it.
    std::atomic_thread_fence(std::memory_order_release);
  }
  return sequence + 1;
}

size_t StackMatches::Publish(uint64_t id, uint64_t sp, uint64_t stack_top, size_t register_count,
                             const uint8_t* register_slots, const uint64_t* register_values,
                             size_t word_count, const uint64_t* word_addresses,
                             const uint64_t* word_values) {
  const size_t first = SetOf(sp, stack_top);
  size_t index = first;
  for (size_t way = first + 1; way < first + kWays; ++way) {
    if (last_used_[way] < last_used_[index]) index = way;
  }
  StackMatchSlot& slot = slots_[index];
  const uint64_t done = BeginWrite(index);
  slot.id.store(id, std::memory_order_relaxed);
  slot.stack_top.store(stack_top, std::memory_order_relaxed);
  slot.counts.store(register_count | uint64_t{word_count} << 8, std::memory_order_relaxed);
  uint64_t packed[2] = {0, 0};
  for (size_t i = 0; i < register_count; ++i) {
    packed[i / 8] |= uint64_t{register_slots[i]} << (8 * (i % 8));
    slot.register_values[i].store(register_values[i], std::memory_order_relaxed);
  }
  slot.register_slots[0].store(packed[0], std::memory_order_relaxed);
  slot.register_slots[1].store(packed[1], std::memory_order_relaxed);
  for (size_t i = 0; i < word_count; ++i) {
    slot.word_offsets[i].store(word_addresses[i] - sp, std::memory_order_relaxed);
    slot.word_values[i].store(word_values[i], std::memory_order_relaxed);
  }
  sequences_[index] = done;
  published_[index] = id + 1;
  last_used_[index] = ++clock_;
  slot.sequence.store(done, std::memory_order_release);
  return index;
}

void StackMatches::Withdraw() {
  for (size_t index = 0; index < kSlots; ++index) {
    if (sequences_[index] != 0) BeginWrite(index);
    published_[index] = 0;
    last_used_[index] = 0;
  }
}

}  // namespace droidheap

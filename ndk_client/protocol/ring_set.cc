#include "protocol/ring_set.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "protocol/shared_memory.h"

namespace droidheap {

RingSet* RingSet::Map(int fd, uint32_t count, size_t page_size, size_t data_size) {
  // The client maps these before its hooks are installed: malloc is the previous allocator's.
  void* storage = malloc(sizeof(RingSet));
  if (storage == nullptr) return nullptr;
  RingSet* set = new (storage) RingSet(fd);
  // One range for all, each ring's mapping right after the last: the client names its own memory
  // to the unreachable-memory sweep in a few ranges (snapshot_channel.h).
  const size_t each = page_size + 2 * data_size;
  void* reserved = mmap(nullptr, count * each, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (uint32_t i = 0; i < count; ++i) {
    SharedRingBuffer* ring =
        reserved == MAP_FAILED
            ? nullptr
            : SharedRingBuffer::Map(fd, uint64_t{i} * (page_size + data_size), page_size,
                                    data_size, static_cast<uint8_t*>(reserved) + i * each);
    if (ring == nullptr) {
      if (reserved != MAP_FAILED) munmap(static_cast<uint8_t*>(reserved) + i * each,
                                         (count - i) * each);
      set->fd_ = -1;  // the caller's still
      Destroy(set);
      return nullptr;
    }
    ring->fd_ = -1;  // the set's
    set->rings_[set->count_++] = ring;
  }
  return set;
}

RingSet* RingSet::Create(uint32_t count, size_t data_size, uint32_t version) {
  const size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (count == 0 || count > kMaxRings || data_size < page_size ||
      (data_size & (data_size - 1)) != 0) {
    return nullptr;
  }
  const int fd = CreateSealedMemory("droidheap_ring", count * (page_size + data_size));
  if (fd < 0) return nullptr;
  RingSet* set = Map(fd, count, page_size, data_size);
  if (set == nullptr) {
    close(fd);
    return nullptr;
  }
  for (uint32_t i = 0; i < count; ++i) set->rings_[i]->Initialize(version);
  return set;
}

RingSet* RingSet::Attach(int fd, uint64_t total_size, uint32_t count) {
  const size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (count == 0 || count > kMaxRings || total_size % count != 0) return nullptr;
  const uint64_t each = total_size / count;
  const uint64_t data_size = each - page_size;
  // Without the seals the daemon's mapping could be truncated under it (SIGBUS). A 64-bit daemon
  // may offer more than a 32-bit process can map twice over.
  if (each <= page_size || (data_size & (data_size - 1)) != 0 ||
      data_size > (SIZE_MAX - page_size) / 2 / count || !IsSealedMemory(fd, total_size)) {
    return nullptr;
  }
  RingSet* set = Map(fd, count, page_size, static_cast<size_t>(data_size));
  if (set == nullptr) return nullptr;
  for (uint32_t i = 0; i < count; ++i) {
    if (!set->rings_[i]->Accept()) {
      set->fd_ = -1;  // the caller keeps the fd
      Destroy(set);
      return nullptr;
    }
  }
  return set;
}

void RingSet::Destroy(RingSet* set) {
  if (set == nullptr) return;
  for (uint32_t i = 0; i < set->count_; ++i) SharedRingBuffer::Destroy(set->rings_[i]);
  if (set->fd_ >= 0) close(set->fd_);
  set->~RingSet();
  free(set);
}

uint64_t RingSet::bytes_pending() const {
  uint64_t pending = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const uint64_t bytes = rings_[i]->bytes_pending();
    pending += bytes < rings_[i]->data_size() ? bytes : rings_[i]->data_size();
  }
  return pending;
}

}  // namespace droidheap

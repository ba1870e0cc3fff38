#include "protocol/ring_buffer.h"

#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <new>

#include "protocol/shared_memory.h"

namespace droidheap {
namespace {

uint64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

SharedRingBuffer::SharedRingBuffer(int fd, uint8_t* base, size_t page_size, size_t data_size)
    : fd_(fd),
      base_(base),
      page_size_(page_size),
      data_size_(data_size),
      meta_(reinterpret_cast<RingBufferMetadata*>(base)),
      data_(base + page_size) {}

void SharedRingBuffer::Destroy(SharedRingBuffer* rb) {
  if (rb == nullptr) return;
  munmap(rb->base_, rb->page_size_ + 2 * rb->data_size_);
  if (rb->fd_ >= 0) close(rb->fd_);
  rb->~SharedRingBuffer();
  free(rb);
}

SharedRingBuffer* SharedRingBuffer::Map(int fd, size_t page_size, size_t data_size) {
  // Reserve the whole range first so both data mappings land back to back.
  void* reserved = mmap(nullptr, page_size + 2 * data_size, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserved == MAP_FAILED) return nullptr;
  uint8_t* base = static_cast<uint8_t*>(reserved);
  if (mmap(base, page_size + data_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
          MAP_FAILED ||
      mmap(base + page_size + data_size, data_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
           fd, static_cast<off_t>(page_size)) == MAP_FAILED) {
    munmap(base, page_size + 2 * data_size);
    return nullptr;
  }
  // Heap use is fine here: the client attaches during heapprofd_initialize, before its hooks are
  // installed, so this allocation goes to the previous allocator. malloc + placement new keeps
  // libstdc++ out of the client.
  void* storage = malloc(sizeof(SharedRingBuffer));
  if (storage == nullptr) {
    munmap(base, page_size + 2 * data_size);
    return nullptr;
  }
  return new (storage) SharedRingBuffer(fd, base, page_size, data_size);
}

SharedRingBuffer* SharedRingBuffer::Create(size_t data_size) {
  size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (!IsPowerOfTwo(data_size) || data_size < page_size) return nullptr;
  int fd = CreateSealedMemory("droidheap_ring", page_size + data_size);
  if (fd < 0) return nullptr;
  SharedRingBuffer* rb = Map(fd, page_size, data_size);
  if (rb == nullptr) {
    close(fd);
    return nullptr;
  }
  rb->meta_->version = kRingBufferVersion;
  rb->meta_->data_size = data_size;
  return rb;
}

SharedRingBuffer* SharedRingBuffer::Attach(int fd, uint64_t expected_total_size) {
  size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Without the seals the daemon's mapping could be truncated under it (SIGBUS).
  if (!IsSealedMemory(fd, expected_total_size) || expected_total_size <= page_size ||
      !IsPowerOfTwo(expected_total_size - page_size)) {
    return nullptr;
  }
  // A 64-bit daemon may offer more than a 32-bit process can map twice over.
  if (expected_total_size - page_size > (SIZE_MAX - page_size) / 2) return nullptr;
  SharedRingBuffer* rb = Map(fd, page_size, expected_total_size - page_size);
  if (rb == nullptr) return nullptr;
  if (rb->meta_->version != kRingBufferVersion || rb->meta_->data_size != rb->data_size_) {
    rb->fd_ = -1;  // the caller keeps the fd
    Destroy(rb);
    return nullptr;
  }
  return rb;
}

SharedRingBuffer::ReserveResult SharedRingBuffer::Reserve(uint32_t type, size_t body_size,
                                                          uint64_t lock_timeout_us,
                                                          Reservation* out) {
  uint64_t total = (sizeof(RecordHeader) + body_size + 7) & ~uint64_t{7};
  if (total > max_record_size()) return ReserveResult::kTooLarge;

  uint64_t deadline = 0;
  for (int spins = 0; meta_->lock.exchange(1, std::memory_order_acquire) != 0; ++spins) {
    if (spins < 100) continue;
    if (deadline == 0) deadline = NowUs() + lock_timeout_us;
    if (NowUs() > deadline) return ReserveResult::kLockTimeout;
    sched_yield();
  }
  uint64_t write_pos = meta_->write_pos.load(std::memory_order_relaxed);
  // A stale read_pos only understates the free space. Every cached value came from the acquire
  // load below, by a writer holding the lock that we now hold: what the reader had finished with
  // then is finished with for us too.
  uint64_t read_pos = meta_->cached_read_pos.load(std::memory_order_relaxed);
  if (write_pos - read_pos + total > data_size_) {
    read_pos = meta_->read_pos.load(std::memory_order_acquire);
    meta_->cached_read_pos.store(read_pos, std::memory_order_relaxed);
    if (write_pos - read_pos + total > data_size_) {
      meta_->lock.store(0, std::memory_order_release);
      return ReserveResult::kFull;
    }
  }
  auto* header = reinterpret_cast<RecordHeader*>(data_ + (write_pos & (data_size_ - 1)));
  header->size.store(0, std::memory_order_relaxed);
  header->type = type;
  // Release: the reader that sees the new write_pos also sees size == 0 (not yet committed).
  meta_->write_pos.store(write_pos + total, std::memory_order_release);
  meta_->lock.store(0, std::memory_order_release);

  out->header = header;
  out->body = reinterpret_cast<uint8_t*>(header + 1);
  out->total_size = static_cast<uint32_t>(total);
  out->position = write_pos;
  return ReserveResult::kOk;
}

void SharedRingBuffer::Commit(const Reservation& r) {
  r.header->size.store(r.total_size, std::memory_order_release);
}

uint64_t SharedRingBuffer::bytes_pending() const {
  return meta_->write_pos.load(std::memory_order_acquire) -
         meta_->read_pos.load(std::memory_order_relaxed);
}

SharedRingBuffer::ReadResult SharedRingBuffer::Peek(RecordView* view) const {
  // Local copies: the client may change the shared values at any time.
  const uint64_t read_pos = meta_->read_pos.load(std::memory_order_relaxed);
  if (known_write_pos_ == read_pos) {
    known_write_pos_ = meta_->write_pos.load(std::memory_order_acquire);
  }
  const uint64_t available = known_write_pos_ - read_pos;
  if (available == 0) return ReadResult::kEmpty;
  // Both positions lie in memory the client can write: a read_pos no record could end at would
  // put the header off its alignment.
  if (available > data_size_ || read_pos % alignof(RecordHeader) != 0) return ReadResult::kCorrupt;
  auto* header = reinterpret_cast<RecordHeader*>(data_ + (read_pos & (data_size_ - 1)));
  const uint32_t size = header->size.load(std::memory_order_acquire);
  if (size == 0) return ReadResult::kEmpty;  // reserved, not committed yet
  const uint32_t record_type = header->type;
  if (size < sizeof(RecordHeader) || size % 8 != 0 || size > available ||
      size > max_record_size()) {
    return ReadResult::kCorrupt;
  }
  view->type = record_type;
  view->body = reinterpret_cast<const uint8_t*>(header + 1);  // contiguous: the data is mapped twice
  view->body_size = size - sizeof(RecordHeader);
  view->next_read_pos = read_pos + size;
  return ReadResult::kRecord;
}

void SharedRingBuffer::Consume(const RecordView& view) {
  // Release: the writer that sees the space free again sees that we are done reading it.
  meta_->read_pos.store(view.next_read_pos, std::memory_order_release);
}

}  // namespace droidheap

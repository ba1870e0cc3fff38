#include "protocol/ring_buffer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "protocol/shared_memory.h"

namespace droidheap {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

constexpr uint64_t kCacheLine = 64;
constexpr uint64_t kPrefetchAhead = 256;  // bytes past a reservation: a few records at -i 1
constexpr int kMaxPrefetchLines = 8;      // a record's share, however large it is

// Whether this CPU takes a hint to fetch a line for writing: arm's and arm64's are part of the
// architecture (a no-op where not implemented); x86's PREFETCHW is where CPUID says so (AMD's
// 3DNowPrefetch bit, Intel's PRFCHW since Broadwell). A read prefetch does not help: the line
// must come exclusive.
bool CpuPrefetchesForWrite() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 8)) != 0;
#else
  return true;
#endif
}

inline void PrefetchForWrite(const uint8_t* line) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetchw %0" : : "m"(*line));
#else
  __builtin_prefetch(line, /*rw=*/1, /*locality=*/3);
#endif
}

// A commit key no byte of an earlier lap holds by chance: from the kernel's random source, or
// failing that the clock and this mapping's (randomized) address, mixed.
uint64_t NewCommitKey(const void* mapping) {
  uint64_t key = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &key, sizeof(key)) != static_cast<ssize_t>(sizeof(key))) key = 0;
    close(fd);
  }
  if (key == 0) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    key = (static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec)) ^
          reinterpret_cast<uintptr_t>(mapping);
    key = (key ^ (key >> 31)) * 0x9e3779b97f4a7c15u;
  }
  return key | 1;
}

}  // namespace

SharedRingBuffer::SharedRingBuffer(int fd, uint8_t* base, size_t page_size, size_t data_size)
    : fd_(fd),
      base_(base),
      page_size_(page_size),
      data_size_(data_size),
      meta_(reinterpret_cast<RingBufferMetadata*>(base)),
      data_(base + page_size),
      prefetch_for_write_(CpuPrefetchesForWrite()) {}

void SharedRingBuffer::Destroy(SharedRingBuffer* rb) {
  if (rb == nullptr) return;
  munmap(rb->base_, rb->page_size_ + 2 * rb->data_size_);
  if (rb->fd_ >= 0) close(rb->fd_);
  rb->~SharedRingBuffer();
  free(rb);
}

SharedRingBuffer* SharedRingBuffer::Map(int fd, uint64_t offset, size_t page_size,
                                       size_t data_size, void* at) {
  // Reserve the whole range first so both data mappings land back to back.
  void* reserved = at != nullptr ? at
                                 : mmap(nullptr, page_size + 2 * data_size, PROT_NONE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserved == MAP_FAILED) return nullptr;
  uint8_t* base = static_cast<uint8_t*>(reserved);
  if (mmap(base, page_size + data_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
           static_cast<off_t>(offset)) == MAP_FAILED ||
      mmap(base + page_size + data_size, data_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
           fd, static_cast<off_t>(offset + page_size)) == MAP_FAILED) {
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

SharedRingBuffer* SharedRingBuffer::Create(size_t data_size, uint32_t version) {
  size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (!IsPowerOfTwo(data_size) || data_size < page_size) return nullptr;
  int fd = CreateSealedMemory("droidheap_ring", page_size + data_size);
  if (fd < 0) return nullptr;
  SharedRingBuffer* rb = Map(fd, 0, page_size, data_size);
  if (rb == nullptr) {
    close(fd);
    return nullptr;
  }
  rb->Initialize(version);
  return rb;
}

void SharedRingBuffer::Initialize(uint32_t version) {
  version_ = version;
  meta_->version = version;
  meta_->data_size = data_size_;
  if (version >= kRingBufferVersion) {
    commit_key_ = NewCommitKey(base_);
    meta_->commit_key = commit_key_;
  }
}

bool SharedRingBuffer::Accept() {
  if (meta_->version != kRingBufferVersion || meta_->data_size != data_size_) return false;
  commit_key_ = meta_->commit_key;
  return true;
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
  SharedRingBuffer* rb = Map(fd, 0, page_size, expected_total_size - page_size);
  if (rb == nullptr) return nullptr;
  if (!rb->Accept()) {
    rb->fd_ = -1;  // the caller keeps the fd
    Destroy(rb);
    return nullptr;
  }
  return rb;
}

SharedRingBuffer::ReserveResult SharedRingBuffer::Reserve(uint32_t type, size_t body_size,
                                                          Reservation* out) {
  const uint64_t total = (sizeof(RecordHeader) + body_size + 7) & ~uint64_t{7};
  if (total > max_record_size()) return ReserveResult::kTooLarge;

  uint64_t write_pos = meta_->write_pos.load(std::memory_order_relaxed);
  do {
    // A stale read_pos only understates the free space. The acquire loads (and the release store
    // of the cache) order our writes after the reader's last reads of the space, through whichever
    // writer read read_pos itself.
    uint64_t read_pos = meta_->cached_read_pos.load(std::memory_order_acquire);
    // A read_pos past this write_pos: the write_pos is stale, and the exchange below fails.
    if (static_cast<int64_t>(write_pos - read_pos) >= 0 &&
        write_pos - read_pos + total > data_size_) {
      read_pos = meta_->read_pos.load(std::memory_order_acquire);
      if (static_cast<int64_t>(write_pos - read_pos) >= 0 &&
          write_pos - read_pos + total > data_size_) {
        return ReserveResult::kFull;
      }
      meta_->cached_read_pos.store(read_pos, std::memory_order_release);
    }
  } while (!meta_->write_pos.compare_exchange_weak(write_pos, write_pos + total,
                                                   std::memory_order_relaxed));
  auto* header = reinterpret_cast<RecordHeader*>(data_ + (write_pos & (data_size_ - 1)));
  // The lines this record moves the writers' window over, kPrefetchAhead bytes on: taken for
  // writing now, they are this thread's by the time a record is written there. Else each is still
  // the reader's from the last lap, and a writer's next locked exchange waits for its stores to
  // take them back: a round trip between cores a record (2.5x -> 1.9x of glibc's time at 4096 on
  // a 2-core machine, 3.6x -> 2.2x at -i 1: docs/benchmarks.md, 2026-12-01).
  if (prefetch_for_write_) {
    const uint64_t end = write_pos + total + kPrefetchAhead;
    int lines = 0;
    for (uint64_t at = (write_pos + kPrefetchAhead) & ~uint64_t{kCacheLine - 1};
         at < end && lines < kMaxPrefetchLines; at += kCacheLine, ++lines) {
      PrefetchForWrite(data_ + (at & (data_size_ - 1)));
    }
  }
  header->size = static_cast<uint32_t>(total);
  header->type = type;
  out->buffer = this;
  out->header = header;
  out->body = reinterpret_cast<uint8_t*>(header + 1);
  out->total_size = static_cast<uint32_t>(total);
  out->position = write_pos;
  return ReserveResult::kOk;
}

uint64_t SharedRingBuffer::bytes_pending() const {
  return meta_->write_pos.load(std::memory_order_acquire) -
         meta_->read_pos.load(std::memory_order_relaxed);
}

bool SharedRingBuffer::CommittedHeader(uint64_t read_pos, uint32_t* size, uint32_t* type) const {
  uint8_t* at = data_ + (read_pos & (data_size_ - 1));
  if (version_ >= kRingBufferVersion) {
    auto* header = reinterpret_cast<RecordHeader*>(at);
    if (header->commit.load(std::memory_order_acquire) != (read_pos ^ commit_key_)) return false;
    *size = header->size;
    *type = header->type;
    return true;
  }
  auto* header = reinterpret_cast<RecordHeaderV2*>(at);
  *size = header->size.load(std::memory_order_acquire);
  *type = header->type;
  return *size != 0;
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
  uint32_t size = 0;
  uint32_t record_type = 0;
  if (!CommittedHeader(read_pos, &size, &record_type)) return ReadResult::kUncommitted;
  const size_t header_size =
      version_ >= kRingBufferVersion ? sizeof(RecordHeader) : sizeof(RecordHeaderV2);
  if (size < header_size || size % 8 != 0 || size > available || size > max_record_size()) {
    return ReadResult::kCorrupt;
  }
  view->type = record_type;
  view->body = data_ + (read_pos & (data_size_ - 1)) + header_size;  // contiguous: mapped twice
  view->body_size = size - header_size;
  view->next_read_pos = read_pos + size;
  view->record_size = size;
  return ReadResult::kRecord;
}

void SharedRingBuffer::Consume(const RecordView& view) {
  // Release: the writer that sees the space free again sees that we are done reading it.
  meta_->read_pos.store(view.next_read_pos, std::memory_order_release);
}

}  // namespace droidheap

// Shared-memory ring buffer carrying records from the client (many writer threads in the profiled
// process) to droidheapd (one reader thread).
//
// Layout of the shared memory object (a sealed memfd created by the daemon):
//   [ metadata page | data area (power of two) ]
// mapped as [ metadata | data | data again ] so that a record that crosses the end of the data area
// is still contiguous in memory (the second mapping aliases the first).
//
// Each record: RecordHeader{commit, size, type} followed by the body, padded to 8 bytes. Writers
// reserve space with a compare-and-swap of write_pos, no lock: a writer preempted while it
// reserved stalls nobody (under a spinlock, four threads on two cores spent a quarter of their time
// waiting for it). The reader may therefore meet a reserved record whose header still holds what an
// earlier lap left there; the writer's last store, with release semantics, is `commit`: the
// record's position XOR the buffer's random commit_key, which nothing else there can hold (an
// earlier header's names an earlier position; other bytes would have to guess the key). The
// reader's acquire load of `commit` pairs with it. The reader never writes the writers' line, it
// only advances read_pos.
//
// The daemon treats everything in the shared memory as hostile: positions and record headers are
// copied locally before they are checked. Record bodies are read in place (a sample's stack copy
// is most of its bytes, and copying it again cost the daemon a fifth of its time): the reader
// copies out any field before checking it and bounds every other read by the checked size, so a
// peer that rewrites a record under it can only spoil that record.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace droidheap {

// 2: the metadata's fields grouped by writer, one cache line each; records_written dropped.
// 3: lock-free reservation, RecordHeader::commit and RingBufferMetadata::commit_key; the metadata
// keeps version 2's offsets (its lock's word unused). The daemon gives a client of protocol 8 or
// older a version 2 buffer, read as RecordHeaderV2s.
constexpr uint32_t kRingBufferVersion = 3;
constexpr uint32_t kRingBufferVersion2 = 2;

// Shared between a 32-bit client and a 64-bit daemon too: one layout on every ABI, as in
// wire_protocol.h (alignas(8) and the offsetof checks; wire_layout_test compares builds). The
// 64-bit atomics must be lock-free on both sides (i386: cmpxchg8b; armeabi-v7a: ldrexd/strexd), or
// the two processes would each take a lock of their own.
struct alignas(8) RecordHeader {
  std::atomic<uint64_t> commit;  // position ^ commit_key once written (see the top of the file)
  uint32_t size;                 // total record bytes incl. header
  uint32_t type;                 // RecordType
};
static_assert(sizeof(RecordHeader) == 16, "shared layout");

// Version 2's header: writers reserved under a lock that cleared `size` first, so 0 meant "not yet
// committed".
struct alignas(8) RecordHeaderV2 {
  std::atomic<uint32_t> size;
  uint32_t type;
};
static_assert(sizeof(RecordHeaderV2) == 8, "shared layout");

// Why a client stopped writing (set by the client, reported in the dump).
enum ClientStopReason : uint32_t {
  kClientRunning = 0,
  kClientBufferOverran = 1,  // buffer full past the timeout (or at once with --no-block-client)
  kClientDisconnected = 2,
};

// Fields are grouped by who writes them, a cache line per group: the reader advancing read_pos
// for every record must not keep taking the writers' line away from them, and back.
struct alignas(64) RingBufferMetadata {
  // Set once by the daemon.
  uint32_t version;
  uint32_t reserved;
  uint64_t data_size;
  uint64_t commit_key;  // version 3: random, never 0
  // The writers'.
  alignas(64) std::atomic<uint32_t> version2_lock;  // version 2's spinlock; unused since
  std::atomic<uint32_t> stop_reason;                // ClientStopReason
  std::atomic<uint64_t> write_pos;
  // A read_pos seen by some writer (stored with release after an acquire load of read_pos):
  // enough to tell that a record fits without touching the reader's line; read_pos itself is read
  // only when this says the buffer is full.
  std::atomic<uint64_t> cached_read_pos;
  std::atomic<uint64_t> records_dropped;
  std::atomic<uint64_t> blocked_us;  // time writers spent waiting for space
  // The reader's.
  alignas(64) std::atomic<uint64_t> read_pos;
  // Set by the daemon before it sleeps; a writer that sees it (with a batch to read, or a record
  // to be read at once: Client::Publish) clears it and sends a wake-up byte on the socket. Read by
  // every writer after every record, so not on the read_pos line.
  alignas(64) std::atomic<uint32_t> reader_sleeping;
};
static_assert(sizeof(RingBufferMetadata) == 4 * 64, "shared layout");
static_assert(offsetof(RingBufferMetadata, data_size) == 8 &&
                  offsetof(RingBufferMetadata, commit_key) == 16 &&
                  offsetof(RingBufferMetadata, version2_lock) == 64 &&
                  offsetof(RingBufferMetadata, stop_reason) == 68 &&
                  offsetof(RingBufferMetadata, write_pos) == 72 &&
                  offsetof(RingBufferMetadata, cached_read_pos) == 80 &&
                  offsetof(RingBufferMetadata, records_dropped) == 88 &&
                  offsetof(RingBufferMetadata, blocked_us) == 96 &&
                  offsetof(RingBufferMetadata, read_pos) == 128 &&
                  offsetof(RingBufferMetadata, reader_sleeping) == 192,
              "shared layout");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

// One mapping of a ring buffer, in either process. Created and owned by one object (the daemon's
// per-client state, or the client's global state); thread-safety as stated per method.
class SharedRingBuffer {
 public:
  struct Reservation {
    SharedRingBuffer* buffer = nullptr;  // the ring it is in
    RecordHeader* header = nullptr;
    uint8_t* body = nullptr;
    uint32_t total_size = 0;
    // Which ring of the writer's set it is in (set by the writer: the ring knows no set).
    uint32_t ring = 0;
    // Where the record starts in the stream of records: the order the daemon reads them in.
    uint64_t position = 0;
  };
  enum class ReserveResult { kOk, kFull, kTooLarge };

  // Daemon side: a new sealed memfd of one metadata page + data_size (power of two, >= page), laid
  // out as `version` (kRingBufferVersion, or kRingBufferVersion2 for an older client).
  static SharedRingBuffer* Create(size_t data_size, uint32_t version = kRingBufferVersion);
  // Client side: map an object received from the daemon; checks size and seals. nullptr on error.
  // On failure the caller keeps ownership of fd.
  static SharedRingBuffer* Attach(int fd, uint64_t expected_total_size);
  // Unmaps and closes the fd (a ring of a RingSet leaves it to the set). Only when no writer can
  // still be using the mapping.
  static void Destroy(SharedRingBuffer* rb);
  struct Deleter {
    void operator()(SharedRingBuffer* rb) const { Destroy(rb); }
  };
  SharedRingBuffer(const SharedRingBuffer&) = delete;
  SharedRingBuffer& operator=(const SharedRingBuffer&) = delete;

  int fd() const { return fd_; }
  uint64_t total_size() const { return page_size_ + data_size_; }
  // The whole mapping: the metadata page and the data area mapped twice.
  const void* mapping() const { return base_; }
  size_t mapping_size() const { return page_size_ + 2 * data_size_; }
  uint64_t data_size() const { return data_size_; }
  RingBufferMetadata* metadata() { return meta_; }

  // Writer side (version 3 only), any thread: reserve `body_size` bytes for a record of `type`.
  // Lock-free; does not allocate.
  ReserveResult Reserve(uint32_t type, size_t body_size, Reservation* out);
  // Publishes a reserved record (release store of its commit tag). The reader waits at a reserved
  // record until it is committed, whatever comes after it.
  void Commit(const Reservation& r) const {
    r.header->commit.store(r.position ^ commit_key_, std::memory_order_release);
  }

  // Reader side, one thread. The next committed record, in place: its body stays in the buffer,
  // not handed back to writers, until Consume(view). See the top of the file for how to read it.
  // kUncommitted: the next record is reserved, its writer not done with it yet.
  enum class ReadResult { kRecord, kEmpty, kUncommitted, kCorrupt };
  struct RecordView {
    uint32_t type = 0;
    const uint8_t* body = nullptr;
    size_t body_size = 0;
    uint64_t next_read_pos = 0;
    uint32_t record_size = 0;  // header included
  };
  ReadResult Peek(RecordView* view) const;
  void Consume(const RecordView& view);
  size_t max_record_size() const { return data_size_ / 2; }
  uint64_t bytes_pending() const;

 private:
  friend class RingSet;
  SharedRingBuffer(int fd, uint8_t* base, size_t page_size, size_t data_size);
  // Maps the ring at `offset` of `fd`: [metadata page | data] there, the data once more after;
  // at `at`, page_size + 2 * data_size bytes the caller reserved, or where the kernel puts it.
  static SharedRingBuffer* Map(int fd, uint64_t offset, size_t page_size, size_t data_size,
                               void* at = nullptr);
  // Lays a new mapping out as `version`, its commit key drawn (daemon side).
  void Initialize(uint32_t version);
  // Whether the metadata the daemon wrote matches this mapping (client side); takes its key.
  bool Accept();
  // The committed record's (size, type) at read_pos, from a header of this buffer's version;
  // false while it is not committed.
  bool CommittedHeader(uint64_t read_pos, uint32_t* size, uint32_t* type) const;

  int fd_;
  uint8_t* base_;
  size_t page_size_;
  size_t data_size_;
  RingBufferMetadata* meta_;
  uint8_t* data_;
  // Copied from the metadata once: the daemon's own, whatever the client writes there later.
  uint32_t version_ = kRingBufferVersion;
  uint64_t commit_key_ = 0;
  // The reader's: the write_pos it last read. Peek reads the writers' line again only once it has
  // read up to here, so that reading a batch of records does not take that line from the writers
  // at every record (each of their reservations would then wait for it to come back).
  mutable uint64_t known_write_pos_ = 0;
  // The writers': whether Reserve fetches the lines ahead of it for writing (ring_buffer.cc).
  bool prefetch_for_write_;
};

}  // namespace droidheap

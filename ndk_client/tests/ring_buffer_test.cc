// SharedRingBuffer: records come out whole and in order, a full buffer says so, records that
// wrap the end of the data area stay contiguous, and hostile metadata is reported, not trusted.
// RingSet: rings of one memfd, each a buffer of its own, mapped one after the other.
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "protocol/ring_buffer.h"
#include "protocol/ring_set.h"
#include "tests/test_util.h"

using droidheap::SharedRingBuffer;
using droidheap::RingSet;
using Buffer = std::unique_ptr<SharedRingBuffer, SharedRingBuffer::Deleter>;
using Rings = std::unique_ptr<RingSet, RingSet::Deleter>;

namespace {

// What the daemon does with a record: look at it in place, copy it out, hand the space back.
SharedRingBuffer::ReadResult ReadNext(SharedRingBuffer* rb, uint32_t* type, uint8_t* out,
                                      size_t out_capacity, size_t* size) {
  SharedRingBuffer::RecordView view;
  const SharedRingBuffer::ReadResult result = rb->Peek(&view);
  if (result != SharedRingBuffer::ReadResult::kRecord) return result;
  CHECK(view.body_size <= out_capacity);
  memcpy(out, view.body, view.body_size);
  *type = view.type;
  *size = view.body_size;
  rb->Consume(view);
  return result;
}

bool Write(SharedRingBuffer* rb, uint32_t type, const void* data, size_t size) {
  SharedRingBuffer::Reservation r;
  if (rb->Reserve(type, size, &r) != SharedRingBuffer::ReserveResult::kOk) return false;
  memcpy(r.body, data, size);
  rb->Commit(r);
  return true;
}

void TestRoundTripInOrder() {
  Buffer rb(SharedRingBuffer::Create(1 << 16));
  CHECK(rb);
  for (uint64_t i = 0; i < 100; ++i) CHECK(Write(rb.get(), 7, &i, sizeof(i)));
  std::vector<uint8_t> out(rb->max_record_size());
  for (uint64_t i = 0; i < 100; ++i) {
    uint32_t type;
    size_t size;
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kRecord);
    uint64_t value;
    memcpy(&value, out.data(), sizeof(value));
    CHECK(type == 7 && size == 8 && value == i);
  }
  uint32_t type;
  size_t size;
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kEmpty);
}

void TestFullBufferRefusesAndRecovers() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  CHECK(rb);
  std::vector<uint8_t> payload(1000, 0xab);
  int written = 0;
  while (Write(rb.get(), 1, payload.data(), payload.size())) ++written;
  CHECK(written == 4);  // 4 x 1016 bytes fit in 4096
  SharedRingBuffer::Reservation r;
  CHECK(rb->Reserve(1, 1000, &r) == SharedRingBuffer::ReserveResult::kFull);
  CHECK(rb->Reserve(1, 4096, &r) == SharedRingBuffer::ReserveResult::kTooLarge);
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord);
  CHECK(Write(rb.get(), 1, payload.data(), payload.size()));
}

void TestRecordsAcrossTheEndStayContiguous() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  for (int round = 0; round < 50; ++round) {
    std::vector<uint8_t> payload(1500);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + round);
    CHECK(Write(rb.get(), 2, payload.data(), payload.size()));
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kRecord);
    CHECK(size >= payload.size() && memcmp(out.data(), payload.data(), payload.size()) == 0);
  }
}

void TestUncommittedRecordIsNotRead() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  SharedRingBuffer::Reservation r;
  CHECK(rb->Reserve(1, 16, &r) == SharedRingBuffer::ReserveResult::kOk);
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kUncommitted);
  rb->Commit(r);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord);
}

// A reservation is made without a lock, so the reader may meet it before its writer has written
// its header: the bytes there are still an earlier lap's, a committed header among them. Not read
// until this record's own commit.
void TestAnEarlierLapsHeaderIsNotTakenForACommit() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  std::vector<uint8_t> payload(1024 - sizeof(droidheap::RecordHeader), 0x5a);
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  for (int i = 0; i < 4; ++i) {  // one lap: records at 0, 1024, 2048 and 3072, read
    CHECK(Write(rb.get(), 1, payload.data(), payload.size()));
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kRecord);
  }
  SharedRingBuffer::Reservation r;
  CHECK(rb->Reserve(2, 8, &r) == SharedRingBuffer::ReserveResult::kOk);
  CHECK(r.position == 4096);  // where the first lap's first header still lies, committed
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
        SharedRingBuffer::ReadResult::kUncommitted);
  rb->Commit(r);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
            SharedRingBuffer::ReadResult::kRecord &&
        type == 2 && size == 8);
}

// A client of protocol 8 or older writes version 2's records, under version 2's lock: size 0
// until committed, an 8-byte header.
void TestAVersion2BufferIsReadAsOne() {
  Buffer rb(SharedRingBuffer::Create(1 << 12, droidheap::kRingBufferVersion2));
  droidheap::RingBufferMetadata* meta = rb->metadata();
  CHECK(meta->version == 2);
  auto* header = reinterpret_cast<droidheap::RecordHeaderV2*>(reinterpret_cast<uint8_t*>(meta) +
                                                             sysconf(_SC_PAGESIZE));
  header->size.store(0);
  header->type = 5;
  const uint64_t value = 0x1122334455667788u;
  memcpy(reinterpret_cast<uint8_t*>(header) + sizeof(*header), &value, sizeof(value));
  meta->write_pos.store(sizeof(*header) + sizeof(value));
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
        SharedRingBuffer::ReadResult::kUncommitted);
  header->size.store(sizeof(*header) + sizeof(value));
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
            SharedRingBuffer::ReadResult::kRecord &&
        type == 5 && size == sizeof(value) && memcmp(out.data(), &value, sizeof(value)) == 0);
  CHECK(meta->read_pos.load() == 16);
}

// A reservation's position is where the reader meets it: the client's sequence numbers
// (Client::SequenceOf) order records as the reader reads them, a record committed late included.
void TestPositionsFollowTheReadOrder() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  SharedRingBuffer::Reservation first, second, third;
  CHECK(rb->Reserve(1, 16, &first) == SharedRingBuffer::ReserveResult::kOk);
  CHECK(rb->Reserve(2, 3, &second) == SharedRingBuffer::ReserveResult::kOk);
  CHECK(first.position == 0 && second.position == first.total_size &&
        second.total_size == 24);  // header and body, rounded up to 8
  rb->Commit(second);
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  // The later record waits behind the earlier one, still being written.
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kUncommitted);
  rb->Commit(first);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord && type == 1);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord && type == 2);
  CHECK(rb->Reserve(3, 0, &third) == SharedRingBuffer::ReserveResult::kOk);
  CHECK(third.position == second.position + second.total_size);
}

void TestHostileMetadataIsReportedCorrupt() {
  std::vector<uint8_t> out(1 << 11);
  uint32_t type;
  size_t size;
  {  // write position far beyond the read position
    Buffer rb(SharedRingBuffer::Create(1 << 12));
    rb->metadata()->write_pos.store(1 << 20);
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kCorrupt);
  }
  {  // a record claiming more bytes than were written
    Buffer rb(SharedRingBuffer::Create(1 << 12));
    SharedRingBuffer::Reservation r;
    CHECK(rb->Reserve(1, 8, &r) == SharedRingBuffer::ReserveResult::kOk);
    r.header->size = 4000;
    rb->Commit(r);
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kCorrupt);
  }
  {  // a size that is not a multiple of 8
    Buffer rb(SharedRingBuffer::Create(1 << 12));
    SharedRingBuffer::Reservation r;
    CHECK(rb->Reserve(1, 8, &r) == SharedRingBuffer::ReserveResult::kOk);
    r.header->size = 13;
    rb->Commit(r);
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kCorrupt);
  }
  {  // a read position off the records' alignment (the records fuzzer found it misaligning reads)
    Buffer rb(SharedRingBuffer::Create(1 << 12));
    rb->metadata()->read_pos.store(3);
    rb->metadata()->write_pos.store(3 + 64);
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kCorrupt);
  }
}

void TestAttachChecksSizeAndSeals() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  int fd = dup(rb->fd());
  CHECK(SharedRingBuffer::Attach(fd, rb->total_size() + 4096) == nullptr);
  CHECK(ftruncate(fd, 0) != 0);  // sealed against shrinking
  Buffer attached(SharedRingBuffer::Attach(fd, rb->total_size()));
  CHECK(attached);
  uint64_t v = 42;
  CHECK(Write(attached.get(), 3, &v, sizeof(v)));
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord);
  CHECK(type == 3);
}

// The client's view of the daemon's rings: each ring is its own buffer (a record written into
// ring 2 comes out of ring 2 alone, with its own commit key), the set's mappings lie one after the
// other, and a size or count that does not divide into rings is refused.
void TestRingsOfASetAreBuffersOfTheirOwn() {
  Rings rings(RingSet::Create(4, 1 << 12));
  CHECK(rings && rings->count() == 4);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  CHECK(rings->total_size() == 4 * (page + (1 << 12)));
  CHECK(rings->mapping_size() == 4 * (page + 2 * (1 << 12)));
  const int fd = dup(rings->fd());
  CHECK(RingSet::Attach(fd, rings->total_size(), 3) == nullptr);
  CHECK(RingSet::Attach(fd, rings->total_size() + 4 * page, 4) == nullptr);
  CHECK(RingSet::Attach(fd, rings->total_size(), RingSet::kMaxRings + 1) == nullptr);
  Rings client(RingSet::Attach(fd, rings->total_size(), 4));
  CHECK(client);
  for (uint32_t i = 0; i < 4; ++i) {
    const auto* at = static_cast<const uint8_t*>(client->ring(i)->mapping());
    CHECK(at == static_cast<const uint8_t*>(client->mapping()) + i * (page + 2 * (1 << 12)));
  }
  CHECK(rings->ring(1)->metadata()->commit_key != rings->ring(2)->metadata()->commit_key);
  uint64_t v = 7;
  CHECK(Write(client->ring(2), 5, &v, sizeof(v)));
  CHECK(rings->bytes_pending() == 24);
  std::vector<uint8_t> out(rings->ring(0)->max_record_size());
  uint32_t type;
  size_t size;
  for (uint32_t i : {0u, 1u, 3u}) {
    CHECK(ReadNext(rings->ring(i), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kEmpty);
  }
  CHECK(ReadNext(rings->ring(2), &type, out.data(), out.size(), &size) ==
        SharedRingBuffer::ReadResult::kRecord);
  CHECK(type == 5 && size == 8 && rings->bytes_pending() == 0);
  // A set of one ring is laid out as a lone buffer: what a client older than protocol 13 maps.
  Rings one(RingSet::Create(1, 1 << 12));
  Buffer lone(SharedRingBuffer::Attach(dup(one->fd()), one->total_size()));
  CHECK(lone && Write(lone.get(), 6, &v, sizeof(v)));
  CHECK(ReadNext(one->ring(0), &type, out.data(), out.size(), &size) ==
        SharedRingBuffer::ReadResult::kRecord);
}

void TestConcurrentWritersLoseNothing() {
  Buffer rb(SharedRingBuffer::Create(1 << 16));
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 50000;
  std::atomic<int> done{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread;) {
        uint64_t v = (static_cast<uint64_t>(t) << 32) | i;
        if (Write(rb.get(), 1, &v, sizeof(v))) ++i;
      }
      done.fetch_add(1);
    });
  }
  std::vector<uint64_t> next(kThreads, 0);
  std::vector<uint8_t> out(rb->max_record_size());
  uint64_t total = 0;
  while (total < kThreads * kPerThread) {
    uint32_t type;
    size_t size;
    auto result = ReadNext(rb.get(), &type, out.data(), out.size(), &size);
    CHECK(result != SharedRingBuffer::ReadResult::kCorrupt);
    if (result != SharedRingBuffer::ReadResult::kRecord) continue;
    uint64_t v;
    memcpy(&v, out.data(), sizeof(v));
    uint64_t thread = v >> 32;
    CHECK(thread < kThreads && (v & 0xffffffff) == next[thread]);  // per-writer order kept
    ++next[thread];
    ++total;
  }
  for (auto& w : writers) w.join();
}

}  // namespace

int main() {
  TestRoundTripInOrder();
  TestFullBufferRefusesAndRecovers();
  TestRecordsAcrossTheEndStayContiguous();
  TestUncommittedRecordIsNotRead();
  TestAnEarlierLapsHeaderIsNotTakenForACommit();
  TestAVersion2BufferIsReadAsOne();
  TestPositionsFollowTheReadOrder();
  TestHostileMetadataIsReportedCorrupt();
  TestAttachChecksSizeAndSeals();
  TestRingsOfASetAreBuffersOfTheirOwn();
  TestConcurrentWritersLoseNothing();
  printf("ring_buffer_test: ok\n");
  return 0;
}

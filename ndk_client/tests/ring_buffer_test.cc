// SharedRingBuffer: records come out whole and in order, a full buffer says so, records that
// wrap the end of the data area stay contiguous, and hostile metadata is reported, not trusted.
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "protocol/ring_buffer.h"
#include "tests/test_util.h"

using droidheap::SharedRingBuffer;
using Buffer = std::unique_ptr<SharedRingBuffer, SharedRingBuffer::Deleter>;

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
  if (rb->Reserve(type, size, 1000, &r) != SharedRingBuffer::ReserveResult::kOk) return false;
  memcpy(r.body, data, size);
  SharedRingBuffer::Commit(r);
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
  CHECK(written == 4);  // 4 x 1008 bytes fit in 4096
  SharedRingBuffer::Reservation r;
  CHECK(rb->Reserve(1, 1000, 1000, &r) == SharedRingBuffer::ReserveResult::kFull);
  CHECK(rb->Reserve(1, 4096, 1000, &r) == SharedRingBuffer::ReserveResult::kTooLarge);
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
  CHECK(rb->Reserve(1, 16, 1000, &r) == SharedRingBuffer::ReserveResult::kOk);
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kEmpty);
  SharedRingBuffer::Commit(r);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord);
}

// A reservation's position is where the reader meets it: the client's sequence numbers
// (Client::SequenceOf) order records as the reader reads them, a record committed late included.
void TestPositionsFollowTheReadOrder() {
  Buffer rb(SharedRingBuffer::Create(1 << 12));
  SharedRingBuffer::Reservation first, second, third;
  CHECK(rb->Reserve(1, 16, 1000, &first) == SharedRingBuffer::ReserveResult::kOk);
  CHECK(rb->Reserve(2, 3, 1000, &second) == SharedRingBuffer::ReserveResult::kOk);
  CHECK(first.position == 0 && second.position == first.total_size &&
        second.total_size == 16);  // header and body, rounded up to 8
  SharedRingBuffer::Commit(second);
  std::vector<uint8_t> out(rb->max_record_size());
  uint32_t type;
  size_t size;
  // The later record waits behind the earlier one, still being written.
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kEmpty);
  SharedRingBuffer::Commit(first);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord && type == 1);
  CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) == SharedRingBuffer::ReadResult::kRecord && type == 2);
  CHECK(rb->Reserve(3, 0, 1000, &third) == SharedRingBuffer::ReserveResult::kOk);
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
    CHECK(rb->Reserve(1, 8, 1000, &r) == SharedRingBuffer::ReserveResult::kOk);
    r.total_size = 4000;
    SharedRingBuffer::Commit(r);
    CHECK(ReadNext(rb.get(), &type, out.data(), out.size(), &size) ==
          SharedRingBuffer::ReadResult::kCorrupt);
  }
  {  // a size that is not a multiple of 8
    Buffer rb(SharedRingBuffer::Create(1 << 12));
    SharedRingBuffer::Reservation r;
    CHECK(rb->Reserve(1, 8, 1000, &r) == SharedRingBuffer::ReserveResult::kOk);
    r.total_size = 13;
    SharedRingBuffer::Commit(r);
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
  TestPositionsFollowTheReadOrder();
  TestHostileMetadataIsReportedCorrupt();
  TestAttachChecksSizeAndSeals();
  TestConcurrentWritersLoseNothing();
  printf("ring_buffer_test: ok\n");
  return 0;
}

// What a hostile client can put in its shared ring buffer (protocol/ring_buffer.h), read by a real
// UnwindingWorker through its public interface: records of every type with any body (sizes that
// lie, registers and stacks that point anywhere, heaps never named; AllocRecords of either layout), then raw bytes written over
// the metadata and the data (positions, headers and committed sizes that lie). The worker must
// book or drop each record, cut the client off on corruption, and give its final snapshot.
//
// With the input's say-so a thread of the "client" also goes on rewriting bytes of the buffer
// while the worker reads it: the reader must copy what it checks before it uses it.
//
// The "client" is this process: its /proc/self/maps and mem are what the worker unwinds with.
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "daemon/unwinding_worker.h"
#include "fuzz/fuzz_input.h"
#include "protocol/ring_buffer.h"

namespace droidheap {
namespace {

constexpr size_t kDataSize = 64 * 1024;

class WaitingSink : public SnapshotSink {
 public:
  void PostSnapshots(uint64_t, std::vector<DumpSnapshot> snapshots) override {
    std::lock_guard<std::mutex> lock(mutex_);
    received_ += snapshots.size();
    done_.notify_all();
  }
  void WaitFor(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return received_ >= count; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  size_t received_ = 0;
};

DaemonConfig FuzzConfig() {
  DaemonConfig config;
  config.all_heaps = true;  // custom heaps' records are booked too
  config.max_stack_bytes = 4096;
  // Low enough that some inputs' bookkeeping passes it (a live table alone takes 40 KiB): the
  // cut-off path gets fuzzed too.
  config.max_memory_bytes = 48 * 1024;
  return config;
}

struct Fixture {
  Fixture() {
    if (!worker.Start()) abort();
  }
  WaitingSink sink;
  std::atomic<uint64_t> session_bytes{0};
  UnwindingWorker worker{FuzzConfig(), &sink, &session_bytes};
  size_t clients = 0;
};

void WriteRecords(FuzzInput* input, SharedRingBuffer* buffer) {
  const uint8_t count = input->Take<uint8_t>() % 32;
  for (uint8_t i = 0; i < count && input->remaining() > 0; ++i) {
    const uint32_t type = input->Take<uint8_t>() % 8;
    const size_t body_size = input->Take<uint16_t>() % 2048;
    SharedRingBuffer::Reservation r;
    if (buffer->Reserve(type, body_size, 1000, &r) != SharedRingBuffer::ReserveResult::kOk) break;
    size_t got;
    const uint8_t* bytes = input->TakeBytes(body_size, &got);
    memset(r.body, 0, body_size);
    memcpy(r.body, bytes, got);
    SharedRingBuffer::Commit(r);
  }
}

// Raw patches over [metadata | data]: lying positions, sizes and headers.
void Scribble(FuzzInput* input, SharedRingBuffer* buffer) {
  uint8_t* base = reinterpret_cast<uint8_t*>(buffer->metadata());
  const size_t span = static_cast<size_t>(buffer->total_size());
  const uint8_t patches = input->Take<uint8_t>() % 8;
  for (uint8_t i = 0; i < patches && input->remaining() > 0; ++i) {
    const size_t at = input->Take<uint32_t>() % span;
    const size_t want = input->Take<uint8_t>() % 16;
    size_t got;
    const uint8_t* bytes = input->TakeBytes(want < span - at ? want : span - at, &got);
    memcpy(base + at, bytes, got);
  }
}

// Rewrites bytes of the buffer, from `seed`'s sequence of positions, until told to stop.
void ScribbleUntil(const std::atomic<bool>* stop, SharedRingBuffer* buffer, uint64_t seed) {
  uint8_t* base = reinterpret_cast<uint8_t*>(buffer->metadata());
  const size_t span = static_cast<size_t>(buffer->total_size());
  while (!stop->load(std::memory_order_relaxed)) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    // Mostly the metadata and the first records, where the reader looks first.
    const size_t at = (seed >> 33) % (seed & 1 ? 4096 + 4096 : span);
    reinterpret_cast<volatile uint8_t*>(base)[at] = static_cast<uint8_t>(seed >> 24);
  }
}

}  // namespace
}  // namespace droidheap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace droidheap;
  static Fixture* fixture = new Fixture;  // one worker thread for every input
  FuzzInput input(data, size);
  auto client = std::make_unique<ClientConnection>();
  client->pid = getpid();
  client->maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  client->mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  client->buffer.reset(SharedRingBuffer::Create(kDataSize));
  int pair[2];
  if (!client->buffer || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) abort();
  client->sock = pair[0];
  const uint8_t mode = input.Take<uint8_t>();
  const uint64_t seed = input.Take<uint64_t>();
  // The records of a client of today and of one from before version 7 (registers unpacked).
  client->version = mode & 2 ? 6 : kProtocolVersion;
  // The scribbler's own mapping, made while the buffer's metadata is still intact; it stays
  // mapped until the scribbler has stopped, whenever the worker unmaps its own.
  std::unique_ptr<SharedRingBuffer, SharedRingBuffer::Deleter> own_view;
  if (mode & 1) {
    const int view_fd = dup(client->buffer->fd());
    own_view.reset(SharedRingBuffer::Attach(view_fd, client->buffer->total_size()));
    if (!own_view) abort();
  }
  WriteRecords(&input, client->buffer.get());
  Scribble(&input, client->buffer.get());
  std::atomic<bool> stop{false};
  std::thread scribbler;
  if (own_view) scribbler = std::thread(ScribbleUntil, &stop, own_view.get(), seed);
  // The client is gone: the worker drains what it left, snapshots it once and forgets it.
  close(pair[1]);
  fixture->worker.PostAddClient(std::move(client));
  fixture->sink.WaitFor(++fixture->clients);
  stop = true;
  if (scribbler.joinable()) scribbler.join();
  return 0;
}

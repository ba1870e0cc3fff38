// What a hostile client can put in its shared ring buffers (protocol/ring_buffer.h, one to four of
// them: ring_set.h), read by a real UnwindingWorker through its public interface: records of every
// type in any ring with any body (sizes that lie, registers and stacks that point anywhere, heaps
// never named, frees in another ring than their allocation's or before it; AllocRecords of either
// layout, matched ones naming any id), then raw bytes written over the metadata and the data
// (positions, headers and committed sizes that lie). The worker must book or drop each record,
// cut the client off on corruption, and give its final snapshot.
//
// With the input's say-so a thread of the "client" also goes on rewriting bytes of the buffer
// while the worker reads it: the reader must copy what it checks before it uses it.
//
// And with its say-so the records never end (issue 41): a thread of the "client" writes one of
// the input's records again as soon as there is room, before, during and after a dump and after
// its socket closed. The dump must still be answered and the client still given its last
// snapshot, the worker reading it up to marks within its budgets (shortened here), never until
// its buffer is empty.
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
#include <vector>

#include "daemon/unwinding_worker.h"
#include "fuzz/fuzz_input.h"
#include "protocol/ring_buffer.h"
#include "protocol/ring_set.h"

namespace droidheap {
namespace {

constexpr size_t kDataSize = 64 * 1024;

class WaitingSink : public SnapshotSink {
 public:
  void PostSnapshots(uint64_t request_id, std::vector<DumpSnapshot> snapshots) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (request_id == 0) {
      last_snapshots_ += snapshots.size();
    } else {
      answered_ = request_id;
    }
    done_.notify_all();
  }
  // Until `count` clients in all have had their last snapshot.
  void WaitForLast(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return last_snapshots_ >= count; });
  }
  void WaitForDump(uint64_t request_id) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return answered_ >= request_id; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  size_t last_snapshots_ = 0;
  uint64_t answered_ = 0;
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

// A fuzzer's budgets: short enough that an input whose records are slow to read reaches the
// cut-offs in milliseconds.
DrainBudgets FuzzBudgets() {
  DrainBudgets budgets;
  budgets.round_us = 1000;
  budgets.dump_us = 20 * 1000;
  budgets.dump_deadline_us = 100 * 1000;
  budgets.last_drain_us = 20 * 1000;
  return budgets;
}

struct Fixture {
  Fixture() {
    if (!worker.Start()) abort();
  }
  WaitingSink sink;
  std::atomic<uint64_t> session_bytes{0};
  UnwindingWorker worker{FuzzConfig(), &sink, &session_bytes, FuzzBudgets()};
  size_t clients = 0;
  uint64_t dumps = 0;
};

// Records into the client's rings, each into the ring the input says (a block's allocation in one,
// its free in another, or before it: what no honest client writes).
void WriteRecords(FuzzInput* input, const RingSet* rings) {
  const uint8_t count = input->Take<uint8_t>() % 32;
  for (uint8_t i = 0; i < count && input->remaining() > 0; ++i) {
    const uint8_t type_and_ring = input->Take<uint8_t>();
    const uint32_t type = (type_and_ring & 15) % 12;
    SharedRingBuffer* buffer = rings->ring((type_and_ring >> 4) % rings->count());
    const size_t body_size = input->Take<uint16_t>() % 2048;
    SharedRingBuffer::Reservation r;
    if (buffer->Reserve(type, body_size, &r) != SharedRingBuffer::ReserveResult::kOk) break;
    size_t got;
    const uint8_t* bytes = input->TakeBytes(body_size, &got);
    memset(r.body, 0, body_size);
    memcpy(r.body, bytes, got);
    buffer->Commit(r);
  }
}

// Raw patches over the rings' [metadata | data]: lying positions, sizes and headers.
void Scribble(FuzzInput* input, const RingSet* rings) {
  const uint8_t patches = input->Take<uint8_t>() % 8;
  for (uint8_t i = 0; i < patches && input->remaining() > 0; ++i) {
    SharedRingBuffer* buffer = rings->ring(input->Take<uint8_t>() % rings->count());
    uint8_t* base = reinterpret_cast<uint8_t*>(buffer->metadata());
    const size_t span = static_cast<size_t>(buffer->total_size());
    const size_t at = input->Take<uint32_t>() % span;
    const size_t want = input->Take<uint8_t>() % 16;
    size_t got;
    const uint8_t* bytes = input->TakeBytes(want < span - at ? want : span - at, &got);
    memcpy(base + at, bytes, got);
  }
}

// Rewrites bytes of the rings, from `seed`'s sequence of positions, until told to stop.
void ScribbleUntil(const std::atomic<bool>* stop, const RingSet* rings, uint64_t seed) {
  while (!stop->load(std::memory_order_relaxed)) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    SharedRingBuffer* buffer = rings->ring((seed >> 8) % rings->count());
    uint8_t* base = reinterpret_cast<uint8_t*>(buffer->metadata());
    const size_t span = static_cast<size_t>(buffer->total_size());
    // Mostly the metadata and the first records, where the reader looks first.
    const size_t at = (seed >> 33) % (seed & 1 ? 4096 + 4096 : span);
    reinterpret_cast<volatile uint8_t*>(base)[at] = static_cast<uint8_t>(seed >> 24);
  }
}

// A record of the input's, written again each time the buffer has room, until told to stop.
// Through the client's own Reserve, which trusts the write position: it is first moved to where a
// header may start (the scribbling may have left it anywhere).
void WriteUntil(const std::atomic<bool>* stop, const RingSet* rings, uint32_t type,
                std::vector<uint8_t> body) {
  SharedRingBuffer* buffer = rings->ring(rings->count() - 1);
  std::atomic<uint64_t>& write_pos = buffer->metadata()->write_pos;
  write_pos.store((write_pos.load() + 7) & ~uint64_t{7});
  while (!stop->load(std::memory_order_relaxed)) {
    SharedRingBuffer::Reservation r;
    switch (buffer->Reserve(type, body.size(), &r)) {
      case SharedRingBuffer::ReserveResult::kOk:
        if (!body.empty()) memcpy(r.body, body.data(), body.size());
        buffer->Commit(r);
        break;
      case SharedRingBuffer::ReserveResult::kTooLarge:
        return;
      default:  // full
        std::this_thread::yield();
    }
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
  const uint8_t mode = input.Take<uint8_t>();
  // One ring, as a client older than protocol 13 has, or up to four.
  client->rings.reset(RingSet::Create((mode >> 3) % 4 + 1, kDataSize));
  int pair[2];
  if (!client->rings || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) abort();
  client->sock = pair[0];
  const uint64_t seed = input.Take<uint64_t>();
  // The records of a client of today and of one from before version 7 (registers unpacked).
  client->version = mode & 2 ? 6 : kProtocolVersion;
  // Today's client matches repeated stacks: the worker publishes them, and reads records naming
  // ids it published, or never did.
  if (client->version >= 14) client->stack_matches.reset(StackMatches::Create());
  // The scribbler's own mapping, made while the buffer's metadata is still intact; it stays
  // mapped until the scribbler has stopped, whenever the worker unmaps its own.
  std::unique_ptr<RingSet, RingSet::Deleter> own_view;
  const bool endless = mode & 4;
  if (mode & 1 || endless) {
    const int view_fd = dup(client->rings->fd());
    own_view.reset(RingSet::Attach(view_fd, client->rings->total_size(), client->rings->count()));
    if (!own_view) abort();
  }
  WriteRecords(&input, client->rings.get());
  // The record written again and again, when the records never end.
  const uint32_t endless_type = input.Take<uint8_t>() % 12;
  size_t got;
  const uint8_t* bytes = input.TakeBytes(input.Take<uint16_t>() % 1024, &got);
  std::vector<uint8_t> endless_body(bytes, bytes + got);
  Scribble(&input, client->rings.get());
  std::atomic<bool> stop{false};
  std::thread scribbler;
  std::thread writer;
  // Not both at once: the writer is the client's own code, which trusts its write position.
  if (mode & 1 && !endless) scribbler = std::thread(ScribbleUntil, &stop, own_view.get(), seed);
  if (endless) {
    writer = std::thread(WriteUntil, &stop, own_view.get(), endless_type, std::move(endless_body));
    // Connected, then gone: a dump is answered, then the last snapshot comes, however long the
    // writer goes on.
    fixture->worker.PostAddClient(std::move(client));
    fixture->worker.PostDump(++fixture->dumps, 0);
    fixture->sink.WaitForDump(fixture->dumps);
    close(pair[1]);
  } else {
    // The client is gone: the worker drains what it left, snapshots it once and forgets it.
    close(pair[1]);
    fixture->worker.PostAddClient(std::move(client));
  }
  fixture->sink.WaitForLast(++fixture->clients);
  stop = true;
  if (scribbler.joinable()) scribbler.join();
  if (writer.joinable()) writer.join();
  return 0;
}

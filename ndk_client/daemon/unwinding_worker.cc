#include "daemon/unwinding_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/client_snapshot.h"
#include "daemon/clock.h"
#include "daemon/log.h"
#include "daemon/process_matcher.h"
#include "daemon/unreachable_scan.h"
#include "reachability/thread_stopper.h"
#include "protocol/wire_protocol.h"

namespace droidheap {
namespace {

constexpr int kPollTimeoutMs = 50;
constexpr int kCommitWaitMs = 1;
// How long a dump waiting for sweeps sleeps between rounds, unless one ends first.
constexpr int kSweepWaitMs = 5;
// How often a record still being written is looked at again, yielding the core between looks (its
// writer may be waiting for it), before the worker polls for kCommitWaitMs.
constexpr int kCommitRetries = 8;
// A round's share of the worker per client: what keeps one busy (or hostile) client from
// starving the rest. Ten milliseconds are a few hundred unwinds, most rounds' whole work.
constexpr size_t kRecordsPerRound = 1 << 16;
// The clock is read every few records: two reads per sample cost 6% of the daemon's time at -i 1.
constexpr size_t kRecordsPerClockRead = 8;
// How often a drain counts the client's bookkeeping against the session's memory cap.
constexpr size_t kRecordsPerMemoryCheck = 1024;
}  // namespace

UnwindingWorker::UnwindingWorker(const DaemonConfig& config, SnapshotSink* sink,
                                 std::atomic<uint64_t>* session_bytes, DrainBudgets budgets)
    : config_(config), sink_(sink), session_bytes_(session_bytes), budgets_(budgets),
      booker_(config_) {}


UnwindingWorker::~UnwindingWorker() {
  Join();
  sweeper_.reset();  // before the pipe it wakes the worker through closes
  for (int fd : wake_pipe_) {
    if (fd >= 0) close(fd);
  }
}

bool UnwindingWorker::Start() {
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  if (config_.find_unreachable) sweeper_ = std::make_unique<UnreachableSweeper>(wake_pipe_[1]);
  thread_ = std::thread(&UnwindingWorker::Run, this);
  return true;
}

void UnwindingWorker::Join() {
  if (thread_.joinable()) thread_.join();
}

void UnwindingWorker::PostTask(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(tasks_mutex_);
    tasks_.push_back(std::move(task));
  }
  char byte = 't';
  (void)!write(wake_pipe_[1], &byte, 1);
}

void UnwindingWorker::PostAddClient(std::unique_ptr<ClientConnection> client) {
  // std::function needs a copyable callable: hand the pointer over raw and re-own it on arrival.
  ClientConnection* raw = client.release();
  PostTask([this, raw] {
    std::unique_ptr<ClientConnection> owned(raw);
    owned->maps.Reload(owned->maps_fd);
    clients_.push_back(std::move(owned));
  });
}

void UnwindingWorker::PostDump(uint64_t request_id, uint64_t timestamp_ns) {
  PostTask([this, request_id, timestamp_ns] { DumpAll(request_id, timestamp_ns); });
}

void UnwindingWorker::PostStop(uint64_t request_id, uint64_t timestamp_ns) {
  PostTask([this, request_id, timestamp_ns] {
    DumpAll(request_id, timestamp_ns);
    stopping_ = true;
  });
}

void UnwindingWorker::RunTasks() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(tasks_mutex_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) task();
}

void UnwindingWorker::BookSweeps() {
  if (sweeper_ == nullptr) return;
  for (SweepOutcome& outcome : sweeper_->TakeOutcomes()) {
    // The client is still here: one with a sweep in flight is not let go.
    for (const auto& client : clients_) {
      if (client.get() == outcome.client) BookSweep(std::move(outcome), client.get());
    }
  }
}

UnwindingWorker::DrainLimits UnwindingWorker::RoundLimits(uint64_t now_us) const {
  return {kRecordsPerRound, now_us + budgets_.round_us};
}

void UnwindingWorker::Run() {
  std::vector<pollfd> fds;
  while (!stopping_) {
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    const uint64_t now_us = MonotonicUs();
    bool written = false;
    for (auto& client : clients_) {
      // Ask for a wake-up byte before sleeping; records written after this are signalled.
      for (uint32_t i = 0; i < client->rings->count(); ++i) {
        SharedRingBuffer* ring = client->rings->ring(i);
        if (ring->bytes_pending() == 0) {
          ring->metadata()->reader_sleeping.store(1, std::memory_order_release);
          std::atomic_thread_fence(std::memory_order_seq_cst);
        }
      }
      // Records written since the last drain found none, before the writer could see the request:
      // no wake-up byte comes for them, and a sleep of kPollTimeoutMs let a fast writer fill its
      // buffer and wait (a single thread at -i 1 waited 40 ms a run). A short sleep lets them
      // gather into a batch: read at once, right behind the writer, the lines it writes next kept
      // moving to the reader's core (the program's CPU +17%).
      written |= !client->socket_closed && client->rings->bytes_pending() != 0;
      const bool quiet = client->socket_quiet_until_us > now_us;
      fds.push_back({client->socket_closed || quiet ? -1 : client->sock, POLLIN, 0});
    }
    poll(fds.data(), fds.size(),
         behind_ ? 0 : awaiting_commit_ || written ? kCommitWaitMs : kPollTimeoutMs);
    behind_ = false;
    awaiting_commit_ = false;
    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (read(wake_pipe_[0], drain, sizeof(drain)) > 0) {
      }
    }
    // Clients first: tasks may remove or snapshot them, invalidating the fds above.
    for (size_t i = 0; i < clients_.size(); ++i) {
      ClientConnection* client = clients_[i].get();
      if (fds[i + 1].revents) ReadSocket(client);
      if (!client->socket_closed && !Drain(client, RoundLimits(MonotonicUs()))) behind_ = true;
    }
    RunTasks();
    BookSweeps();
    // Threads a snapshot's hold could not let go in time are let go once they stop (--unreachable).
    if (config_.find_unreachable) ThreadStopper::ReleaseLate();
    // A client whose socket closed: read up to what it had written then, swept (its exit's
    // snapshot), final dump, forget.
    for (auto it = clients_.begin(); it != clients_.end();) {
      ClientConnection* client = it->get();
      if (client->socket_closed && DrainClosing(client) && client->sweeps_in_flight == 0) {
        std::vector<DumpSnapshot> last;
        last.push_back(SnapshotOf(config_, client, MonotonicCoarseNs()));
        sink_->PostSnapshots(0, std::move(last));
        session_bytes_->fetch_sub(client->booked_bytes, std::memory_order_relaxed);
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void UnwindingWorker::ReadSocket(ClientConnection* client) {
  // A client sends a byte when it finds the worker asleep, and each of its threads waiting for room
  // in a full buffer one every 100 us: a busy process's may pile up, a hostile one's flood the
  // socket. A round reads this much; past it, the socket is left unpolled until the worker's next
  // timed look, when a client is drained anyway (what it sends is a wake-up, nothing more).
  constexpr int kReadsPerRound = 4;
  char bytes[4096];
  for (int i = 0; i < kReadsPerRound; ++i) {
    ssize_t n = recv(client->sock, bytes, sizeof(bytes), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      client->socket_closed = true;
      client->execed = !client->exiting &&
                       ProcessMatcher::ExecedFrom(client->pid, client->cmdline, client->exe);
    }
    return;
  }
  client->socket_quiet_until_us = MonotonicUs() + kPollTimeoutMs * 1000;
}

bool UnwindingWorker::DrainClosing(ClientConnection* client) {
  if (!client->closing) {
    client->closing = true;
    client->last_mark = client->WrittenMark();
  }
  DrainLimits limits = RoundLimits(MonotonicUs());
  limits.until = &client->last_mark;
  if (Drain(client, limits, &client->last_drain_time)) return true;
  if (client->last_drain_time.Within(budgets_.last_drain_us)) {
    behind_ = true;
    return false;
  }
  Stall(client, "what it had written when its socket closed", budgets_.last_drain_us);
  return true;
}

void UnwindingWorker::Stall(ClientConnection* client, const char* mark, uint64_t budget_us) {
  client->stalled = true;
  Log("warning: pid=%d kept droidheapd from reading its buffer up to %s in time (%llu ms): its "
      "profile ends here", client->pid, mark, static_cast<unsigned long long>(budget_us / 1000));
  CutOff(client);
}

bool UnwindingWorker::Drain(ClientConnection* client, const DrainLimits& limits,
                            DrainTime* spent) {
  if (client->buffer_corrupted || client->hit_guardrail || client->stalled) return true;
  // Timed per batch: two clock reads per sample cost 6% of the daemon's time at -i 1.
  const uint64_t begin_us = MonotonicUs();
  // A budget counts the worker's own CPU time: on a busy machine (or a slow sanitized daemon's)
  // the wall clock runs on while the worker waits for a core, and an honest client was cut off.
  const uint64_t begin_cpu_us = spent != nullptr ? ThreadCpuUs() : 0;
  // Files' tables an unwind needs count against the same time (ElfCache, HandleAlloc).
  booker_.elf_cache().SetLoadDeadline(limits.deadline_us);
  bool done = DrainRecords(client, limits);
  if (OverMemoryCap(client)) done = true;  // cut off: nothing more is read
  if (sweeper_ != nullptr) StartSweep(config_, client, sweeper_.get());
  const uint64_t end_us = MonotonicUs();
  client->unwinding_time_us += end_us - begin_us;
  if (spent != nullptr) {
    spent->cpu_us += ThreadCpuUs() - begin_cpu_us;
    spent->wall_us += end_us - begin_us;
  }
  return done;
}

bool UnwindingWorker::DrainRecords(ClientConnection* client, const DrainLimits& limits) {
  const uint32_t count = client->rings->count();
  size_t records = limits.max_records;
  // Each ring in turn, from the one the last drain stopped in (a sample put off there is read
  // first again), until every ring is done.
  for (uint32_t done = 0; done < count; ++done) {
    switch (DrainRing(client, client->next_ring, limits, &records)) {
      case RingDrained::kDone:
        break;
      case RingDrained::kCutOff:
        return true;
      case RingDrained::kStopped:
        return false;
    }
    client->next_ring = (client->next_ring + 1) % count;
  }
  return true;
}

UnwindingWorker::RingDrained UnwindingWorker::DrainRing(ClientConnection* client, uint32_t index,
                                                        const DrainLimits& limits,
                                                        size_t* records) {
  SharedRingBuffer* ring = client->rings->ring(index);
  const uint64_t until = limits.until != nullptr ? (*limits.until)[index] : UINT64_MAX;
  for (; *records > 0; --*records) {
    if (client->consumed[index] >= until) return RingDrained::kDone;
    if (*records % kRecordsPerClockRead == 0 && MonotonicUs() >= limits.deadline_us) {
      return RingDrained::kStopped;
    }
    SharedRingBuffer::RecordView record;
    SharedRingBuffer::ReadResult result = ring->Peek(&record);
    for (int retry = 0; result == SharedRingBuffer::ReadResult::kUncommitted &&
                        retry < kCommitRetries; ++retry) {
      sched_yield();
      result = ring->Peek(&record);
    }
    switch (result) {
      case SharedRingBuffer::ReadResult::kEmpty:
        return RingDrained::kDone;
      case SharedRingBuffer::ReadResult::kUncommitted:
        awaiting_commit_ = true;
        return RingDrained::kDone;
      case SharedRingBuffer::ReadResult::kCorrupt:
        // A client that scribbles over the buffer is cut off; what it sent before stays booked.
        client->buffer_corrupted = true;
        CutOff(client);
        return RingDrained::kCutOff;
      case SharedRingBuffer::ReadResult::kRecord:
        break;
    }
    if (!HandleRecord(client, index, record)) return RingDrained::kStopped;
    ring->Consume(record);
    client->consumed[index] += record.record_size;
    client->consumed_bytes += record.record_size;
    if (*records % kRecordsPerMemoryCheck == 0 && OverMemoryCap(client)) {
      return RingDrained::kCutOff;
    }
  }
  return RingDrained::kStopped;
}

bool UnwindingWorker::HandleRecord(ClientConnection* client, uint32_t ring,
                                   const SharedRingBuffer::RecordView& record) {
  if (record.type == kRecordAlloc) {
    return booker_.HandleAlloc(client, &client->malloc_heap, ring, record.body, record.body_size);
  }
  if (record.type == kRecordAllocMatched) {
    booker_.HandleMatchedAlloc(client, &client->malloc_heap, ring, record.body, record.body_size);
  } else if (record.type == kRecordFree) {
    booker_.HandleFree(&client->malloc_heap, ring, record.body, record.body_size);
  } else if (record.type == kRecordHeapAlloc) {
    HeapTracker* heap = booker_.CustomHeapOf(client, record.body, record.body_size);
    return heap == nullptr || booker_.HandleAlloc(client, heap, ring, record.body + sizeof(HeapTag),
                                                  record.body_size - sizeof(HeapTag));
  } else if (record.type == kRecordHeapAllocMatched) {
    HeapTracker* heap = booker_.CustomHeapOf(client, record.body, record.body_size);
    if (heap != nullptr) {
      booker_.HandleMatchedAlloc(client, heap, ring, record.body + sizeof(HeapTag),
                                 record.body_size - sizeof(HeapTag));
    }
  } else if (record.type == kRecordHeapFree) {
    HeapTracker* heap = booker_.CustomHeapOf(client, record.body, record.body_size);
    if (heap != nullptr) {
      booker_.HandleFree(heap, ring, record.body + sizeof(HeapTag),
                         record.body_size - sizeof(HeapTag));
    }
  } else if (record.type == kRecordHeapName) {
    booker_.NameCustomHeap(client, record.body, record.body_size);
  } else if (record.type == kRecordRecording && !client->recording) {
    client->recording = true;  // said once: a hostile client's repeats are not logged
    Log("recording pid=%d", client->pid);
  } else if (record.type == kRecordExiting && !client->exiting) {
    // Before Consume: the process waits in its exit path until this record is consumed. Read
    // once: a hostile client's repeats cost nothing.
    client->exiting = true;
    client->memory_at_exit = ReadProcessMemory(client->pid);
    ExitingRecord exiting{0, 0};  // none before protocol 16: read at exit
    if (record.body_size >= sizeof(exiting)) memcpy(&exiting, record.body, sizeof(exiting));
    client->allocator_not_read_at_exit = (exiting.flags & kExitingAllocatorNotRead) != 0;
    // Its globals still hold what they held (as LeakSanitizer's exit check sees them). A
    // dump's snapshot read up to its mark goes to be swept first: one waits at a time.
    if (sweeper_ != nullptr) StartSweep(config_, client, sweeper_.get());
    TakeUnreachableSnapshot(config_, client, MonotonicCoarseNs());
  } else if (record.type == kRecordAllocatorStats &&
             record.body_size >= sizeof(AllocatorStatsRecord)) {
    AllocatorStatsRecord stats;
    memcpy(&stats, record.body, sizeof(stats));
    client->allocator = stats;
  }
  return true;
}

bool UnwindingWorker::OverMemoryCap(ClientConnection* client) {
  if (config_.max_memory_bytes == 0) return false;
  uint64_t bytes = client->callstacks.memory_bytes() + client->malloc_heap.memory_bytes() +
                   client->stack_cache.memory_bytes() + client->unreachable_heap.memory_bytes() +
                   client->published_matches.capacity() * sizeof(ClientConnection::PublishedMatch);
  for (const auto& [number, custom] : client->custom_heaps) bytes += custom.tracker.memory_bytes();
  const uint64_t cache = booker_.elf_cache().memory_bytes();
  session_bytes_->fetch_add(cache - elf_cache_booked_, std::memory_order_relaxed);
  elf_cache_booked_ = cache;
  const uint64_t session = session_bytes_->fetch_add(bytes - client->booked_bytes,
                                                     std::memory_order_relaxed) +
                           bytes - client->booked_bytes;
  client->booked_bytes = bytes;
  if (session <= config_.max_memory_bytes) return false;
  client->hit_guardrail = true;
  CutOff(client);
  return true;
}

void UnwindingWorker::CutOff(ClientConnection* client) {
  shutdown(client->sock, SHUT_RDWR);
  client->socket_closed = true;
}

// Each client is read up to its mark, what it had written when the dump was asked, and
// snapshotted there; round by round, so that one client's records do not keep the others' dump
// (or the others' writers, read on meanwhile) waiting. One that is not at its mark within
// budgets_.dump_us of the worker's time (DrainTime), or when the whole dump's deadline passes, is
// cut off.
void UnwindingWorker::DumpAll(uint64_t request_id, uint64_t timestamp_ns) {
  const size_t count = clients_.size();
  const uint64_t deadline_us = MonotonicUs() + budgets_.dump_deadline_us;
  std::vector<RingBytes> marks(count);
  std::vector<DrainTime> spent(count);
  std::vector<bool> taken(count, false);
  // Taken at its mark, its sweep still running: the verdict joins the dump when it ends, and the
  // client is read on meanwhile (its program would stand still with its buffer full).
  std::vector<bool> sweeping(count, false);
  std::vector<DumpSnapshot> snapshots(count);
  for (size_t i = 0; i < count; ++i) {
    ClientConnection* client = clients_[i].get();
    TakeUnreachableSnapshot(config_, client, timestamp_ns);
    marks[i] = client->WrittenMark();
  }
  for (size_t left = count; left > 0;) {
    const bool late = MonotonicUs() >= deadline_us;
    BookSweeps();
    bool awaiting_sweep = false;
    for (size_t i = 0; i < count; ++i) {
      ClientConnection* client = clients_[i].get();
      if (sweeping[i] && (client->sweeps_in_flight == 0 || late)) {
        // Past the dump's deadline, the last verdict stays in it (dated).
        AddUnreachable(config_, *client, &snapshots[i]);
        sweeping[i] = false;
        --left;
      }
      awaiting_sweep |= sweeping[i];
      if (taken[i]) {
        if (!client->socket_closed) Drain(client, RoundLimits(MonotonicUs()));
        continue;
      }
      DrainLimits limits = RoundLimits(MonotonicUs());
      limits.deadline_us = std::min(limits.deadline_us, deadline_us);
      limits.until = &marks[i];
      if (late) {
        Stall(client, "a dump's mark", budgets_.dump_deadline_us);
      } else if (!Drain(client, limits, &spent[i]) || SnapshotAwaitsRecords(*client)) {
        // (A snapshot waits for records its held threads had begun: they commit them soon.)
        if (spent[i].Within(budgets_.dump_us)) continue;
        Stall(client, "a dump's mark", budgets_.dump_us);
      }
      snapshots[i] = SnapshotOf(config_, client, timestamp_ns);
      taken[i] = true;
      sweeping[i] = client->sweeps_in_flight > 0 && !late;
      awaiting_sweep |= sweeping[i];
      if (!sweeping[i]) --left;
    }
    if (awaiting_sweep) sweeper_->WaitForOutcome(kSweepWaitMs);
  }
  sink_->PostSnapshots(request_id, std::move(snapshots));
}

}  // namespace droidheap

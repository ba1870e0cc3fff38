#include "daemon/unwinding_worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
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
#include "daemon/output_file.h"
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
constexpr size_t kMaxFrames = 256;
// Entries published to a client's stack matches, at most: each id stays valid for the session
// (a record naming it may come long after), so a process whose call paths keep displacing each
// other in the slots stops being published to, rather than growing this without end.
constexpr size_t kMaxPublishedMatches = size_t{1} << 20;
// How much of a sample to ask the memory system for before reading it (see HandleAlloc).
constexpr size_t kPrefetchBytes = 16 * 1024;
constexpr size_t kCacheLine = 64;

// The profiler's own code on the stack: the client library, and on the emulated device the
// emulation layer standing in for libc's malloc entry points.
bool IsProfilerLibrary(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return base == "heapprofd_client.so" || base == "libdroidheap_libc.so";
}

MappingInfo PseudoMapping(const char* name) {
  MappingInfo m;
  m.path = name;
  return m;
}

MappingInfo ToMappingInfo(const MapEntry& e) {
  MappingInfo m;
  // A library inside an APK as the linker names it: "/data/app/…/base.apk!/lib/x86_64/libfoo.so".
  m.path = e.elf.entry.empty() ? e.path : e.path + "!/" + e.elf.entry;
  m.build_id = e.build_id;
  m.start = e.start;
  m.end = e.end;
  m.offset = e.offset;
  m.elf_offset = e.elf.offset;
  m.load_bias = e.load_bias;
  return m;
}

}  // namespace

UnwindingWorker::UnwindingWorker(const DaemonConfig& config, SnapshotSink* sink,
                                 std::atomic<uint64_t>* session_bytes, DrainBudgets budgets)
    : config_(config), sink_(sink), session_bytes_(session_bytes), budgets_(budgets) {
  if (!config_.stack_log_path.empty()) {
    // Shared by every worker, each appending whole lines.
    stack_log_fd_ = OpenOutputFile(config_.stack_log_path, O_APPEND);
  }
}

uint64_t UnwindingWorker::ElfCacheBytes(const DaemonConfig& config) {
  if (config.max_memory_bytes == 0) return ElfCache::kDefaultMaxBytes;
  constexpr uint64_t kLeast = uint64_t{16} << 20;
  return std::max(kLeast, config.max_memory_bytes / 4 / std::max(1, config.workers));
}

UnwindingWorker::~UnwindingWorker() {
  Join();
  sweeper_.reset();  // before the pipe it wakes the worker through closes
  if (stack_log_fd_ >= 0) close(stack_log_fd_);
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

uint64_t UnwindingWorker::PendingBytes(ClientConnection* client) {
  // Both positions are the client's to write: never more than a buffer.
  return std::min<uint64_t>(client->buffer->bytes_pending(), client->buffer->data_size());
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
      if (client->buffer->bytes_pending() == 0) {
        client->buffer->metadata()->reader_sleeping.store(1, std::memory_order_release);
        std::atomic_thread_fence(std::memory_order_seq_cst);
      }
      // Records written since the last drain found none, before the writer could see the request:
      // no wake-up byte comes for them, and a sleep of kPollTimeoutMs let a fast writer fill its
      // buffer and wait (a single thread at -i 1 waited 40 ms a run). A short sleep lets them
      // gather into a batch: read at once, right behind the writer, the lines it writes next kept
      // moving to the reader's core (the program's CPU +17%).
      written |= !client->socket_closed && client->buffer->bytes_pending() != 0;
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
    }
    return;
  }
  client->socket_quiet_until_us = MonotonicUs() + kPollTimeoutMs * 1000;
}

bool UnwindingWorker::DrainClosing(ClientConnection* client) {
  if (!client->closing) {
    client->closing = true;
    client->last_mark = client->consumed_bytes + PendingBytes(client);
  }
  DrainLimits limits = RoundLimits(MonotonicUs());
  limits.until_bytes = client->last_mark;
  if (Drain(client, limits, &client->last_budget_us)) return true;
  if (client->last_budget_us < budgets_.last_drain_us) {
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
                            uint64_t* spent_us) {
  if (client->buffer_corrupted || client->hit_guardrail || client->stalled) return true;
  // Timed per batch: two clock reads per sample cost 6% of the daemon's time at -i 1.
  const uint64_t begin_us = MonotonicUs();
  // Files' tables an unwind needs count against the same time (ElfCache, HandleAlloc).
  elf_cache_.SetLoadDeadline(limits.deadline_us);
  bool done = DrainRecords(client, limits);
  if (OverMemoryCap(client)) done = true;  // cut off: nothing more is read
  if (sweeper_ != nullptr) StartSweep(config_, client, sweeper_.get());
  const uint64_t end_us = MonotonicUs();
  client->unwinding_time_us += end_us - begin_us;
  if (spent_us != nullptr) *spent_us += end_us - begin_us;
  return done;
}

bool UnwindingWorker::DrainRecords(ClientConnection* client, const DrainLimits& limits) {
  for (size_t i = 0; i < limits.max_records; ++i) {
    if (client->consumed_bytes >= limits.until_bytes) return true;
    if (i % kRecordsPerClockRead == kRecordsPerClockRead - 1 &&
        MonotonicUs() >= limits.deadline_us) {
      return false;
    }
    SharedRingBuffer::RecordView record;
    SharedRingBuffer::ReadResult result = client->buffer->Peek(&record);
    for (int retry = 0; result == SharedRingBuffer::ReadResult::kUncommitted &&
                        retry < kCommitRetries; ++retry) {
      sched_yield();
      result = client->buffer->Peek(&record);
    }
    switch (result) {
      case SharedRingBuffer::ReadResult::kEmpty:
        return true;
      case SharedRingBuffer::ReadResult::kUncommitted:
        awaiting_commit_ = true;
        return true;
      case SharedRingBuffer::ReadResult::kCorrupt:
        // A client that scribbles over the buffer is cut off; what it sent before stays booked.
        client->buffer_corrupted = true;
        CutOff(client);
        return true;
      case SharedRingBuffer::ReadResult::kRecord:
        break;
    }
    if (record.type == kRecordAlloc) {
      if (!HandleAlloc(client, &client->malloc_heap, record.body, record.body_size)) return false;
    } else if (record.type == kRecordAllocMatched) {
      HandleMatchedAlloc(client, &client->malloc_heap, record.body, record.body_size);
    } else if (record.type == kRecordFree) {
      HandleFree(&client->malloc_heap, record.body, record.body_size);
    } else if (record.type == kRecordHeapAlloc) {
      HeapTracker* heap = CustomHeapOf(client, record.body, record.body_size);
      if (heap != nullptr && !HandleAlloc(client, heap, record.body + sizeof(HeapTag),
                                          record.body_size - sizeof(HeapTag))) {
        return false;
      }
    } else if (record.type == kRecordHeapAllocMatched) {
      HeapTracker* heap = CustomHeapOf(client, record.body, record.body_size);
      if (heap != nullptr) {
        HandleMatchedAlloc(client, heap, record.body + sizeof(HeapTag),
                           record.body_size - sizeof(HeapTag));
      }
    } else if (record.type == kRecordHeapFree) {
      HeapTracker* heap = CustomHeapOf(client, record.body, record.body_size);
      if (heap != nullptr) {
        HandleFree(heap, record.body + sizeof(HeapTag), record.body_size - sizeof(HeapTag));
      }
    } else if (record.type == kRecordHeapName) {
      NameCustomHeap(client, record.body, record.body_size);
    } else if (record.type == kRecordRecording && !client->recording) {
      client->recording = true;  // said once: a hostile client's repeats are not logged
      Log("recording pid=%d", client->pid);
    } else if (record.type == kRecordExiting && !client->exiting) {
      // Before Consume: the process waits in its exit path until this record is consumed. Read
      // once: a hostile client's repeats cost nothing.
      client->exiting = true;
      client->memory_at_exit = ReadProcessMemory(client->pid);
      // Its globals still hold what they held (as LeakSanitizer's exit check sees them). A
      // dump's snapshot read up to its mark goes to be swept first: one waits at a time.
      if (sweeper_ != nullptr) StartSweep(config_, client, sweeper_.get());
      TakeUnreachableSnapshot(config_, client, MonotonicCoarseNs(), [client] {
        return client->consumed_bytes + PendingBytes(client);
      });
    } else if (record.type == kRecordAllocatorStats &&
               record.body_size >= sizeof(AllocatorStatsRecord)) {
      AllocatorStatsRecord stats;
      memcpy(&stats, record.body, sizeof(stats));
      client->allocator = stats;
    }
    client->buffer->Consume(record);
    client->consumed_bytes += record.record_size;
    if (i % kRecordsPerMemoryCheck == kRecordsPerMemoryCheck - 1 && OverMemoryCap(client)) {
      return true;
    }
  }
  return false;
}

bool UnwindingWorker::OverMemoryCap(ClientConnection* client) {
  if (config_.max_memory_bytes == 0) return false;
  uint64_t bytes = client->callstacks.memory_bytes() + client->malloc_heap.memory_bytes() +
                   client->stack_cache.memory_bytes() + client->unreachable_heap.memory_bytes() +
                   client->published_matches.capacity() * sizeof(ClientConnection::PublishedMatch);
  for (const auto& [number, custom] : client->custom_heaps) bytes += custom.tracker.memory_bytes();
  const uint64_t cache = elf_cache_.memory_bytes();
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

HeapTracker* UnwindingWorker::CustomHeapOf(ClientConnection* client, const uint8_t* body,
                                           size_t size) {
  if (size < sizeof(HeapTag)) return nullptr;
  HeapTag tag;
  memcpy(&tag, body, sizeof(tag));
  auto found = client->custom_heaps.find(tag.heap);
  return found != client->custom_heaps.end() ? &found->second.tracker : nullptr;
}

// A heap the session does not record, a number out of range or a heap named twice: ignored.
void UnwindingWorker::NameCustomHeap(ClientConnection* client, const uint8_t* body,
                                     size_t size) {
  if (size < sizeof(HeapNameRecord)) return;
  HeapNameRecord record;
  memcpy(&record, body, sizeof(record));
  const std::string name(record.name, strnlen(record.name, sizeof(record.name) - 1));
  if (record.heap == 0 || record.heap > kMaxCustomHeaps || name.empty() ||
      !config_.RecordsCustomHeap(name)) {
    return;
  }
  client->custom_heaps.emplace(record.heap, ClientConnection::CustomHeap{name, {}});
}

void UnwindingWorker::HandleFree(HeapTracker* heap, const uint8_t* body, size_t size) {
  if (size < sizeof(FreeRecord)) return;
  FreeRecord record;
  memcpy(&record, body, sizeof(record));
  heap->RecordFree(record.address, record.sequence);
}

bool UnwindingWorker::HandleAlloc(ClientConnection* client, HeapTracker* heap,
                                  const uint8_t* body, size_t size) {
  if (size < sizeof(AllocRecord)) return true;
  // The record was just written on another core, so nearly every line of it misses the cache, and
  // the unwinder's reads depend on each other (each frame's CFA on the last one's registers): read
  // as they come, the misses would be paid one after the other. Asked for up front, they overlap.
  for (size_t offset = 0; offset < size && offset < kPrefetchBytes; offset += kCacheLine) {
    __builtin_prefetch(body + offset);
  }
  AllocRecord record;
  memcpy(&record, body, sizeof(record));
  const size_t register_bytes = AllocRecordRegisterBytes(client->version, *client->layout);
  if (size < sizeof(AllocRecord) + register_bytes ||
      record.stack_size > size - sizeof(AllocRecord) - register_bytes || record.alloc_size == 0 ||
      record.sample_size == 0) {
    return true;
  }
  uint64_t regs[kMaxRegisters];
  if (client->version >= 7) {
    uint64_t captured[kMaxRegisters];
    memcpy(captured, body + sizeof(AllocRecord), register_bytes);
    ExpandCapturedRegisters(*client->layout, captured, regs);
  } else {
    memcpy(regs, body + sizeof(AllocRecord), register_bytes);
  }
  const uint8_t* stack = body + sizeof(AllocRecord) + register_bytes;
  const uint64_t stack_top =
      UnwindStackTop(record.stack_pointer, record.stack_size, config_.max_stack_bytes);
  remote_memory_.Begin(client->mem_fd);
  StackMemory memory(record.stack_pointer, stack, record.stack_size, &remote_memory_);
  const uint64_t maps_generation = client->maps.generation();
  UnwoundStackCache::Entry* seen =
      client->stack_cache.Find(*client->layout, regs, stack_top, memory, maps_generation);
  uint32_t callstack;
  if (seen != nullptr) {
    callstack = seen->callstack;
    if (seen->error != UnwindError::kNone) ++client->unwinding_errors;
    if (stack_log_fd_ >= 0) LogStack(*client, record.sequence, seen->logged_pcs, seen->error);
    // Repeated: the client can tell the next repeat itself.
    PublishMatch(client, seen);
  } else {
    if (!UnwindAndIntern(client, record.sequence, regs, stack_top, &memory, &callstack)) {
      return false;
    }
    WithdrawStaleMatches(client);
  }
  BookSample(client, heap, record.address, record.sequence, callstack, record.sample_size,
             record.alloc_size);
  return true;
}

void UnwindingWorker::HandleMatchedAlloc(ClientConnection* client, HeapTracker* heap,
                                         const uint8_t* body, size_t size) {
  if (size < sizeof(MatchedAllocRecord)) return;
  MatchedAllocRecord record;
  memcpy(&record, body, sizeof(record));
  // Ids are the daemon's own: one it never published names nothing.
  if (record.match >= client->published_matches.size() || record.alloc_size == 0 ||
      record.sample_size == 0) {
    return;
  }
  const ClientConnection::PublishedMatch& match =
      client->published_matches[static_cast<size_t>(record.match)];
  if (match.error != UnwindError::kNone) ++client->unwinding_errors;
  if (stack_log_fd_ >= 0) LogStack(*client, record.sequence, match.logged_pcs, match.error);
  BookSample(client, heap, record.address, record.sequence, match.callstack, record.sample_size,
             record.alloc_size);
}

void UnwindingWorker::BookSample(ClientConnection* client, HeapTracker* heap, uint64_t address,
                                 uint64_t sequence, uint32_t callstack, uint64_t sample_size,
                                 uint64_t alloc_size) {
  // A small allocation that caught n sample points stands for interval*n bytes; credit objects the
  // same way, so that counts stay unbiased too.
  const uint64_t count =
      sample_size > alloc_size ? (sample_size + alloc_size / 2) / alloc_size : 1;
  heap->RecordAlloc(address, sequence, callstack, sample_size, count, alloc_size);
  ++client->heap_samples;
}

void UnwindingWorker::PublishMatch(ClientConnection* client, UnwoundStackCache::Entry* entry) {
  StackMatches* matches = client->stack_matches.get();
  if (matches == nullptr || matches->Holds(entry->sp, entry->stack_top, entry->published) ||
      client->published_matches.size() >= kMaxPublishedMatches ||
      entry->words.size() > StackMatchSlot::kMaxWords) {
    return;
  }
  const RegisterLayout& layout = *client->layout;
  uint8_t slots[StackMatchSlot::kMaxRegisters];
  uint64_t values[StackMatchSlot::kMaxRegisters];
  size_t count = 0;
  auto add = [&](uint32_t number, uint64_t value) {
    if (number >= 64 || (layout.captured >> number & 1) == 0) return false;
    const auto slot = static_cast<uint8_t>(CapturedSlot(layout, number));
    for (size_t i = 0; i < count; ++i) {
      if (slots[i] == slot) return true;
    }
    if (count == StackMatchSlot::kMaxRegisters) return false;
    slots[count] = slot;
    values[count++] = value;
    return true;
  };
  if (!add(layout.pc, entry->pc) || !add(layout.sp, entry->sp)) return;
  for (size_t i = 0; i < entry->register_count; ++i) {
    if (!add(entry->register_numbers[i], entry->register_values[i])) return;
  }
  uint64_t addresses[StackMatchSlot::kMaxWords];
  uint64_t words[StackMatchSlot::kMaxWords];
  for (size_t i = 0; i < entry->words.size(); ++i) {
    addresses[i] = entry->words[i].address;
    words[i] = entry->words[i].value;
  }
  WithdrawStaleMatches(client);  // the entry's maps are the current ones (Find)
  entry->published = client->published_matches.size();
  client->published_matches.push_back({entry->callstack, entry->error, entry->logged_pcs});
  matches->Publish(entry->published, entry->sp, entry->stack_top, count, slots, values,
                   entry->words.size(), addresses, words);
}

void UnwindingWorker::WithdrawStaleMatches(ClientConnection* client) {
  if (client->stack_matches != nullptr &&
      client->stack_matches_generation != client->maps.generation()) {
    client->stack_matches->Withdraw();
    client->stack_matches_generation = client->maps.generation();
  }
}

// Unwinds a sample's stack, books its frames as a call stack and keeps the result for the samples
// whose stacks repeat it (UnwoundStackCache).
bool UnwindingWorker::UnwindAndIntern(ClientConnection* client, uint64_t sequence,
                                      const uint64_t* regs, uint64_t stack_top,
                                      StackMemory* memory, uint32_t* callstack) {
  UnwindResult& unwound = unwound_;  // reused: its pcs keep their capacity
  const uint64_t maps_generation = client->maps.generation();
  UnwindInputs& inputs = unwind_inputs_;
  memory->RecordReads(&inputs.words);
  unwinder_.Unwind(*client->layout, regs, stack_top, *memory, &client->maps,
                   client->maps_fd, kMaxFrames, &unwound, &inputs);
  memory->RecordReads(nullptr);
  if (unwound.maps_reloaded) ++client->map_reparses;
  // Read again once the tables it went without are read, unless that keeps failing (a stack
  // through more files than the cache holds): then booked as unwound, not kept.
  constexpr int kMaxPutOffs = 64;  // each reads one file at least
  if (elf_cache_.deferred()) {
    if (client->put_off_at != client->consumed_bytes) client->put_off_times = 0;
    client->put_off_at = client->consumed_bytes;
    if (++client->put_off_times <= kMaxPutOffs) return false;
  }

  std::vector<FrameInfo>& frames = frames_;  // innermost first while building
  frames.clear();
  std::vector<uint64_t>& booked_pcs = booked_pcs_;
  booked_pcs.clear();
  bool in_profiler = true;  // leading frames are the client's own (and the emulated libc's)
  for (size_t i = 0; i < unwound.pcs.size(); ++i) {
    const uint64_t pc = unwound.pcs[i];
    const MapEntry* map = i < unwound.maps.size() && unwound.maps[i] != nullptr
                              ? unwound.maps[i]
                              : client->maps.Find(pc, &elf_cache_);
    if (map == nullptr) {
      frames.push_back({client->callstacks.InternMapping(PseudoMapping("[droidheap: unknown mapping]")),
                        pc});
    } else {
      const uint32_t mapping = MappingId(client, *map);
      if (mapping == ClientConnection::kProfilerMapping) {
        if (in_profiler) continue;
        // The profiler's library below the app's frames (a callback into libc): booked as is.
        frames.push_back({client->callstacks.InternMapping(ToMappingInfo(*map)),
                          map->RelPc(pc)});
      } else {
        frames.push_back({mapping, map->RelPc(pc)});
      }
    }
    in_profiler = false;
    if (stack_log_fd_ >= 0) booked_pcs.push_back(pc);
  }
  if (unwound.error != UnwindError::kNone) {
    ++client->unwinding_errors;
    // Where the profile shows it; the frame's address is the UnwindError.
    frames.push_back({client->callstacks.InternMapping(PseudoMapping("[droidheap: unwind error]")),
                      static_cast<uint64_t>(unwound.error)});
  }
  if (stack_log_fd_ >= 0) LogStack(*client, sequence, booked_pcs, unwound.error);
  for (const std::string& problem : elf_cache_.TakeProblems()) {
    Log("warning: pid=%d: %s", client->pid, problem.c_str());
  }
  std::reverse(frames.begin(), frames.end());
  *callstack = client->callstacks.InternCallstack(frames);
  UnwoundStackCache::Entry* kept = client->stack_cache.Keep(
      *client->layout, regs, stack_top, *memory, maps_generation, inputs);
  if (kept != nullptr) {
    kept->callstack = *callstack;
    kept->error = unwound.error;
    kept->logged_pcs = booked_pcs;
  }
  return true;
}

// Frames of one mapping are booked by the thousand: the mapping's identity is worked out (strings
// copied and compared) once per map entry, not once per frame.
uint32_t UnwindingWorker::MappingId(ClientConnection* client, const MapEntry& map) {
  const std::vector<MapEntry>& entries = client->maps.entries();
  if (client->mapping_ids_generation != client->maps.generation()) {
    client->mapping_ids.assign(entries.size(), ClientConnection::kNotYetSeen);
    client->mapping_ids_generation = client->maps.generation();
  }
  uint32_t& id = client->mapping_ids[static_cast<size_t>(&map - entries.data())];
  if (id == ClientConnection::kNotYetSeen) {
    id = IsProfilerLibrary(map.path) ? ClientConnection::kProfilerMapping
                                     : client->callstacks.InternMapping(ToMappingInfo(map));
  }
  return id;
}

void UnwindingWorker::LogStack(const ClientConnection& client, uint64_t sequence,
                               const std::vector<uint64_t>& pcs, UnwindError error) {
  std::string line = std::to_string(client.pid) + " " + std::to_string(sequence);
  char hex[24];
  for (uint64_t pc : pcs) {
    snprintf(hex, sizeof(hex), " %" PRIx64, pc);
    line += hex;
  }
  if (error != UnwindError::kNone) line += " !" + std::to_string(static_cast<uint32_t>(error));
  line += "\n";
  // One write per line: lines from several workers never interleave (O_APPEND).
  if (write(stack_log_fd_, line.data(), line.size()) < 0) {
    close(stack_log_fd_);
    stack_log_fd_ = -1;
  }
}

// Each client is read up to its mark, what it had written when the dump was asked, and
// snapshotted there; round by round, so that one client's records do not keep the others' dump
// (or the others' writers, read on meanwhile) waiting. One that is not at its mark within
// budgets_.dump_us of the worker's time, or when the whole dump's deadline passes, is cut off.
void UnwindingWorker::DumpAll(uint64_t request_id, uint64_t timestamp_ns) {
  const size_t count = clients_.size();
  const uint64_t deadline_us = MonotonicUs() + budgets_.dump_deadline_us;
  std::vector<uint64_t> marks(count);
  std::vector<uint64_t> spent_us(count, 0);
  std::vector<bool> taken(count, false);
  // Taken at its mark, its sweep still running: the verdict joins the dump when it ends, and the
  // client is read on meanwhile (its program would stand still with its buffer full).
  std::vector<bool> sweeping(count, false);
  std::vector<DumpSnapshot> snapshots(count);
  for (size_t i = 0; i < count; ++i) {
    ClientConnection* client = clients_[i].get();
    TakeUnreachableSnapshot(config_, client, timestamp_ns,
                            [client] { return client->consumed_bytes + PendingBytes(client); });
    marks[i] = client->consumed_bytes + PendingBytes(client);
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
      limits.until_bytes = marks[i];
      if (late) {
        Stall(client, "a dump's mark", budgets_.dump_deadline_us);
      } else if (!Drain(client, limits, &spent_us[i]) || SnapshotAwaitsRecords(*client)) {
        // (A snapshot waits for records its held threads had begun: they commit them soon.)
        if (spent_us[i] < budgets_.dump_us) continue;
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

#include "client/client.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "client/custom_heaps.h"
#include "client/register_capture.h"
#include "client/thread_totals.h"
#include "common/platform.h"

#ifdef DROIDHEAP_REFERENCE_UNWIND
extern "C" void DroidheapReferenceUnwind(int pid, uint64_t sequence);
#endif

namespace droidheap {
namespace {

constexpr uint64_t kAllocatorStatsPeriodUs = 100 * 1000;
// glibc's mallinfo visits every free block, with the arenas locked: tens of ms once a program has
// freed a large heap (perl's hash of 800k keys, at exit: 0.5 s, half its run). Reading the
// allocator's figures takes 1 in this of the time at most (ReadAllocatorFigures,
// AllocatorReadFitsShare), or this many us.
constexpr uint64_t kAllocatorStatsTimeShare = 100;
constexpr uint64_t kAllocatorReadFloorUs = 10 * 1000;
// What a walk costs a free block, foreseen: a miss to memory.
constexpr uint64_t kWalkNsPerFreeBlock = 100;
// A sleeping daemon is woken for samples once the buffer holds this fraction of itself (Publish).
constexpr uint64_t kWakeBatchFraction = 16;

// Per-thread stack bounds, found once per thread (pthread_getattr_np allocates; the hook guard
// makes that allocation pass straight through).
DROIDHEAP_TLS uint64_t t_stack_low = 0;
DROIDHEAP_TLS uint64_t t_stack_high = 0;
// The thread's id, found once (glibc makes every gettid a system call). A child that inherits it
// from a raw clone() is caught by the ProcessIdentity check before it is read.
DROIDHEAP_TLS uint32_t t_tid = 0;
// The thread's number among those that sampled, from 1 (0: none yet): which ring it writes to
// (Client::RingOf), in every session.
DROIDHEAP_TLS uint32_t t_ring_number = 0;
std::atomic<uint32_t> g_threads_numbered{0};
// Where the thread's last record in the first ring ended, and how often another thread's records
// came between two of its own there (Client::RingOf at -i 1).
DROIDHEAP_TLS uint64_t t_first_ring_end = 0;
DROIDHEAP_TLS uint32_t t_first_ring_interleaved = 0;
// At -i 1 a thread moves to a ring of its own once others wrote between its records this often.
constexpr uint32_t kInterleavedBeforeOwnRing = 64;

uint64_t ClockUs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

uint64_t NowUs() { return ClockUs(CLOCK_MONOTONIC); }

// A sample record's fields that both kinds have, written straight into the ring, field by field:
// a record built on the stack and copied was read back in 16-byte pieces just after its 8-byte
// stores, each read waiting for them (store forwarding fails across stores; the program's time
// at -i 1 about 3% less without). The body is 8-byte aligned (ring_buffer.h), and the daemon
// reads nothing of it before Publish.
template <typename Record>
Record* WriteSampleFields(uint8_t* body, uint64_t sequence, uint64_t address,
                          uint64_t sample_size, uint64_t alloc_size, uint32_t tid) {
  auto* record = reinterpret_cast<Record*>(body);
  record->sequence = sequence;
  record->address = address;
  record->sample_size = sample_size;
  record->alloc_size = alloc_size;
  record->tid = tid;
  return record;
}

}  // namespace

std::atomic<uint32_t> Client::kept_generation_{0};
std::atomic<uint32_t>* Client::generation_ = &Client::kept_generation_;

void Client::PlaceGeneration() {
  void* page = MapPageWipedOnFork();
  if (page == nullptr) return;
  generation_ = new (page) std::atomic<uint32_t>(kept_generation_.load());
}

bool Client::SocketIsOurs() const {
  struct stat st;
  return fstat(sock_, &st) == 0 && st.st_dev == sock_dev_ && st.st_ino == sock_ino_;
}

bool Client::Wake() {
  // (A thread of the program could still reuse the number between the check and the send: a
  // window of two system calls, against every later wake-up that the check stops.)
  if (!SocketIsOurs()) return false;
  return send(sock_, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0 || errno == EAGAIN ||
         errno == EWOULDBLOCK;
}

int Client::TakeSnapshotChannel(SnapshotRange* ranges, size_t* range_count) {
  const int channel = snapshot_channel_;
  snapshot_channel_ = -1;
  size_t count = 0;
  const auto add = [&](const void* start, size_t size) {
    const uint64_t address = reinterpret_cast<uintptr_t>(start);
    if (start != nullptr && count < kMaxProfilerRanges) ranges[count++] = {address, address + size};
  };
  add(sampled_, kSampledTablesBytes);  // custom_sampled_ and the large tables follow it
  add(rings_->mapping(), rings_->mapping_size());
  if (stack_matches_ != nullptr) add(stack_matches_->mapping(), StackMatches::kSize);
  *range_count = count;
  return channel;
}

bool Client::StackBounds(uint64_t sp, uint64_t* top) {
  if (__builtin_expect(sp >= t_stack_low && sp < t_stack_high, 1)) {
    *top = t_stack_high;
    return true;
  }
  return StackBoundsElsewhere(sp, top);
}

bool Client::StackBoundsElsewhere(uint64_t sp, uint64_t* top) {
  if (t_stack_high == 0) {
    // pthread_getattr_np allocates (and pthread_attr_destroy frees): not the program's calls.
    ThisThreadTotals().set_profiler_allocating(true);
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        t_stack_low = reinterpret_cast<uintptr_t>(addr);
        t_stack_high = FramesTop(t_stack_low, t_stack_low + size, &t_stack_high, sp);
      }
      pthread_attr_destroy(&attr);
    }
    ThisThreadTotals().set_profiler_allocating(false);
  }
  if (sp >= t_stack_low && sp < t_stack_high) {
    *top = t_stack_high;
    return true;
  }
  // A signal handler running on an alternate stack.
  stack_t alt;
  if (sigaltstack(nullptr, &alt) == 0 && (alt.ss_flags & SS_ONSTACK)) {
    uint64_t low = reinterpret_cast<uintptr_t>(alt.ss_sp);
    if (sp >= low && sp < low + alt.ss_size) {
      *top = low + alt.ss_size;
      return true;
    }
  }
  return false;
}

uint32_t Client::RingOf(uint32_t heap) {
  const uint32_t count = rings_->count();
  if (count == 1 || heap != 0 || sampled_->full()) return 0;
  // At -i 1 the table holds the blocks of the other rings alone (sampled_addresses.h), each at the
  // cost of an insert and a removal: a thread writes to the first ring, at no such cost, until
  // other threads' records come between its own there, and then to one of the others.
  const bool first_is_free = sampled_->reports_every_free();
  if (first_is_free && t_first_ring_interleaved < kInterleavedBeforeOwnRing) return 0;
  if (t_ring_number == 0) {
    t_ring_number = g_threads_numbered.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  return first_is_free ? 1 + (t_ring_number - 1) % (count - 1) : (t_ring_number - 1) % count;
}

bool Client::Reserve(uint32_t ring, uint32_t type, size_t body_size,
                     SharedRingBuffer::Reservation* out) {
  SharedRingBuffer* buffer = rings_->ring(ring);
  out->ring = ring;
  const SharedRingBuffer::ReserveResult result = buffer->Reserve(type, body_size, out);
  if (__builtin_expect(result == SharedRingBuffer::ReserveResult::kOk, 1)) return true;
  return ReserveAfter(result, buffer, type, body_size, out);
}

bool Client::ReserveAfter(SharedRingBuffer::ReserveResult result, SharedRingBuffer* buffer,
                          uint32_t type, size_t body_size, SharedRingBuffer::Reservation* out) {
  // Full: the thread waits for the daemon to read. Its pause doubles up to kMaxPauseUs, so that a
  // program's many threads waiting at once do not take the cores the daemon needs to make room
  // (32 threads polling every 100 us starved it on a busy machine). The timeout runs from the
  // daemon's last progress, not from the wait's start: a daemon that reads on, however slowly,
  // keeps the profile, and one that reads nothing for that long is gone or stuck.
  constexpr uint64_t kFirstPauseUs = 100;
  constexpr uint64_t kMaxPauseUs = 4000;
  uint64_t pause_us = kFirstPauseUs;
  uint64_t deadline = 0;
  uint64_t read_pos_seen = 0;
  for (;; result = buffer->Reserve(type, body_size, out)) {
    switch (result) {
      case SharedRingBuffer::ReserveResult::kOk:
        return true;
      case SharedRingBuffer::ReserveResult::kTooLarge:
        buffer->metadata()->records_dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
      case SharedRingBuffer::ReserveResult::kFull:
        break;
    }
    // Dropping a record would corrupt the daemon's view (a lost free leaves a phantom live
    // allocation), so either wait for the daemon or end the session.
    if (!(config_.flags & kFlagBlockClient)) {
      Shutdown(kClientBufferOverran);
      return false;
    }
    const uint64_t now = NowUs();
    const uint64_t read_pos = buffer->metadata()->read_pos.load(std::memory_order_acquire);
    if (deadline == 0 || read_pos != read_pos_seen) {
      read_pos_seen = read_pos;
      deadline = now + config_.block_timeout_us;
    } else if (now > deadline) {
      Shutdown(kClientBufferOverran);
      return false;
    }
    // Make sure the daemon is awake and still there.
    if (!Wake()) {
      Shutdown(kClientDisconnected);
      return false;
    }
    timespec pause{0, static_cast<long>(pause_us * 1000)};
    nanosleep(&pause, nullptr);
    buffer->metadata()->blocked_us.fetch_add(pause_us, std::memory_order_relaxed);
    pause_us = pause_us * 2 < kMaxPauseUs ? pause_us * 2 : kMaxPauseUs;
    if (!enabled()) return false;
  }
}

uint8_t* Client::ReserveRecord(uint32_t ring, uint32_t heap, RecordType malloc_type,
                               size_t body_size, SharedRingBuffer::Reservation* r) {
  if (heap == 0) {
    if (!Reserve(ring, malloc_type, body_size, r)) return nullptr;
    if (ring == 0 && sampled_->reports_every_free()) {  // RingOf
      if (r->position != t_first_ring_end) ++t_first_ring_interleaved;
      t_first_ring_end = r->position + r->total_size;
    }
    return r->body;
  }
  const RecordType type = malloc_type == kRecordAlloc          ? kRecordHeapAlloc
                          : malloc_type == kRecordAllocMatched ? kRecordHeapAllocMatched
                                                               : kRecordHeapFree;
  if (!Reserve(ring, type, sizeof(HeapTag) + body_size, r)) return nullptr;
  const HeapTag tag{heap, 0};
  memcpy(r->body, &tag, sizeof(tag));
  return r->body + sizeof(tag);
}

void Client::Publish(const SharedRingBuffer::Reservation& r) {
  const uint32_t type = r.header->type;
  SharedRingBuffer* buffer = r.buffer;
  buffer->Commit(r);
  RingBufferMetadata* meta = buffer->metadata();
  if (!meta->reader_sleeping.load(std::memory_order_relaxed)) return;
  // A sample or a free can wait for the daemon's next look (it polls every 50 ms) until the
  // buffer holds a batch: woken at every record, a daemon that keeps up sleeps again at once, and
  // the program paid two system calls a record (a third of its time at -i 1). What must be read
  // soon (a process saying it records, or exits) wakes it at once.
  const bool sample = type == kRecordAlloc || type == kRecordFree || type == kRecordHeapAlloc ||
                      type == kRecordHeapFree || type == kRecordAllocatorStats ||
                      type == kRecordAllocMatched || type == kRecordHeapAllocMatched;
  const uint64_t end = r.position + r.total_size;
  if (sample) {
    // The reader's line is read once a batch, not at every record.
    std::atomic<uint64_t>& next_check = next_wake_check_[r.ring].next;
    if (end < next_check.load(std::memory_order_relaxed)) return;
    const uint64_t batch = buffer->data_size() / kWakeBatchFraction;
    const uint64_t read_pos = meta->read_pos.load(std::memory_order_relaxed);
    if (end - read_pos < batch) {
      next_check.store(read_pos + batch, std::memory_order_relaxed);
      return;
    }
  }
  if (meta->reader_sleeping.exchange(0, std::memory_order_acq_rel)) {
    if (!Wake()) Shutdown(kClientDisconnected);
  }
}

bool Client::RecordsHeap(const char* name) const {
  if (config_.heap_flags & kHeapsAllCustom) return true;
  // Connect ended the last name within the array.
  const char* names = config_.heap_names;
  for (size_t at = 0; at < sizeof(config_.heap_names) && names[at] != '\0';
       at += strlen(names + at) + 1) {
    if (strncmp(names + at, name, kHeapNameSize) == 0) return true;
  }
  return false;
}

void Client::RecordAlloc(uint32_t heap, uint64_t address, uint64_t alloc_size,
                         uint64_t sample_size) {
  // A child still running our hooks (client/process_identity.h) is not the process the daemon
  // knows.
  if (!identity_.InOriginalProcess()) return;
  // The table's lines for this address are nearly always cold: asked for now, they come while the
  // registers are taken, the stack matched and the record written.
  SampledAddresses* sampled = SampledOf(heap);
  const uint64_t key = SampledKey(heap, address);
  sampled->Prefetch(key);
  // The stack copy starts at this frame, so whatever lives on it is copied too: the registers
  // take no more room than this ABI captures, and the record is written in place, not built here.
  uint64_t regs[kNativeCaptured];
  DroidheapCaptureRegisters(regs);
  uint64_t sp = regs[kCapturedSpSlot];
  uint64_t top = 0;
  uint64_t whole_stack = 0;  // above sp
  if (StackBounds(sp, &top)) whole_stack = top - sp;
  const uint64_t stack_size =
      whole_stack < config_.max_stack_bytes ? whole_stack : config_.max_stack_bytes;
  if (t_tid == 0) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  // A call path the daemon has unwound before (protocol/stack_matches.h) goes as a reference to
  // it: a few words compared instead of the stack copied, wherever they are in the stack.
  const uint64_t match =
      stack_matches_ != nullptr
          ? stack_matches_->Match(regs, kNativeCaptured, sp, whole_stack,
                                  UnwindStackTop(sp, stack_size, config_.max_stack_bytes))
          : StackMatches::kNoMatch;
  // Written, then put in the table, then published: the table's lines arrive while the record is
  // written, and the program does not have the block before (nothing can free it meanwhile). A
  // block the table cannot hold goes to ring 0, where its free is reported too: written there
  // again, the first record cancelled.
  SharedRingBuffer::Reservation r;
  uint64_t sequence;
  for (uint32_t ring = RingOf(heap);; ring = 0) {
    if (match != StackMatches::kNoMatch) {
      uint8_t* body =
          ReserveRecord(ring, heap, kRecordAllocMatched, sizeof(MatchedAllocRecord), &r);
      if (body == nullptr) return;
      sequence = SequenceOf(r);
      auto* record = WriteSampleFields<MatchedAllocRecord>(body, sequence, address, sample_size,
                                                           alloc_size, t_tid);
      record->match = match;
      record->reserved = 0;
    } else {
      uint8_t* body = ReserveRecord(ring, heap, kRecordAlloc,
                                    sizeof(AllocRecord) + sizeof(regs) + stack_size, &r);
      if (body == nullptr) return;
      sequence = SequenceOf(r);
      auto* record =
          WriteSampleFields<AllocRecord>(body, sequence, address, sample_size, alloc_size, t_tid);
      record->stack_pointer = sp;
      record->stack_size = static_cast<uint32_t>(stack_size);
      memcpy(body + sizeof(AllocRecord), regs, sizeof(regs));
      memcpy(body + sizeof(AllocRecord) + sizeof(regs),
             reinterpret_cast<const void*>(static_cast<uintptr_t>(sp)),
             static_cast<size_t>(stack_size));
    }
    if (sampled->Insert(key, ring) || ring == 0) break;
    r.header->type = kRecordCancelled;
    Publish(r);
  }
  Publish(r);
  RecordAllocatorStats();
#ifdef DROIDHEAP_REFERENCE_UNWIND
  DroidheapReferenceUnwind(identity_.pid(), sequence);  // test builds: client/reference_unwind.cc
#endif
}

bool Client::BeginFree(uint32_t heap, uint64_t address, SharedRingBuffer::Reservation* r) {
  uint32_t ring;
  if (!SampledOf(heap)->Remove(SampledKey(heap, address), &ring)) return false;
  // A child freeing a block it inherited would take it out of its parent's profile.
  if (!identity_.InOriginalProcess()) return false;
  // Behind its allocation, in the same ring.
  uint8_t* body = ReserveRecord(ring, heap, kRecordFree, sizeof(FreeRecord), r);
  if (body == nullptr) return false;
  auto* record = reinterpret_cast<FreeRecord*>(body);  // field by field: WriteSampleFields
  record->sequence = SequenceOf(*r);
  record->address = address;
  return true;
}

void Client::EndFree(uint32_t heap, uint64_t address, const SharedRingBuffer::Reservation& r,
                     bool freed) {
  if (!freed) {
    SampledOf(heap)->Insert(SampledKey(heap, address), r.ring);
    r.header->type = kRecordCancelled;
  }
  Publish(r);
}

void Client::DeclareHeap(uint32_t heap, const char* name) {
  if (!identity_.InOriginalProcess()) return;
  SharedRingBuffer::Reservation r;
  if (!Reserve(0, kRecordHeapName, sizeof(HeapNameRecord), &r)) return;
  HeapNameRecord record{heap, 0, {}};
  strncpy(record.name, name, sizeof(record.name) - 1);
  memcpy(r.body, &record, sizeof(record));
  Publish(r);
}

void Client::AnnounceRecording() {
  if (!identity_.InOriginalProcess()) return;
  SharedRingBuffer::Reservation r;
  if (Reserve(0, kRecordRecording, 0, &r)) Publish(r);
}

void Client::AnnounceExit() {
  if (!identity_.InOriginalProcess()) return;
  ExitingRecord exiting{0, 0};
  if (AllocatorReadFitsShare(NowUs())) {
    SendAllocatorFigures(ReadAllocatorFigures());
  } else {
    exiting.flags |= kExitingAllocatorNotRead;
  }
  SharedRingBuffer::Reservation r;
  if (!Reserve(0, kRecordExiting, sizeof(exiting), &r)) return;
  memcpy(r.body, &exiting, sizeof(exiting));
  Publish(r);
}

void Client::RecordAllocatorStats() {
  if (!identity_.InOriginalProcess()) return;
  // Asked on every sample: the coarse clock (a tick of a few ms, plenty for a 100 ms period) is
  // a read of the vDSO's page, where the precise one cost 5% of a 4-thread program's time under
  // droidheap (its time source read, a paravirtual clock in a VM).
  const uint64_t now_us = ClockUs(CLOCK_MONOTONIC_COARSE);
  const uint64_t due = next_allocator_stats_us_.load(std::memory_order_relaxed);
  if (__builtin_expect(now_us < due, 1)) return;
  SendAllocatorStats(now_us, due);
}

void Client::SendAllocatorStats(uint64_t now_us, uint64_t due) {
  // One thread sends; the others go on.
  if (!next_allocator_stats_us_.compare_exchange_strong(due, now_us + kAllocatorStatsPeriodUs,
                                                        std::memory_order_relaxed)) {
    return;
  }
  // A walk foreseen to be long waits until it is within its share of the time since the last.
  const uint64_t foreseen_us = FreeBlocksForeseen(false) * kWalkNsPerFreeBlock / 1000;
  const uint64_t last_us = last_allocator_read_us_.load(std::memory_order_relaxed);
  if (now_us > last_us && foreseen_us * kAllocatorStatsTimeShare > now_us - last_us) {
    next_allocator_stats_us_.store(last_us + foreseen_us * kAllocatorStatsTimeShare,
                                   std::memory_order_relaxed);
    return;
  }
  SendAllocatorFigures(ReadAllocatorFigures());
}

HeapTotals Client::CallsCounted() const {
  return kMallinfoWalksFreeBlocks && totals_ != nullptr ? totals_->Sum() : HeapTotals{};
}

uint64_t Client::FreeBlocksForeseen(bool at_most) const {
  const uint64_t frees_then = last_read_frees_.load(std::memory_order_relaxed);
  const uint64_t allocations_then = last_read_allocations_.load(std::memory_order_relaxed);
  const HeapTotals calls = CallsCounted();
  const uint64_t frees = calls.free_count > frees_then ? calls.free_count - frees_then : 0;
  const uint64_t allocations =
      calls.alloc_count > allocations_then ? calls.alloc_count - allocations_then : 0;
  const uint64_t blocks = last_read_free_blocks_.load(std::memory_order_relaxed);
  if (at_most) return blocks + frees;
  return blocks + frees > allocations ? blocks + frees - allocations : 0;
}

AllocatorFigures Client::ReadAllocatorFigures() {
  const HeapTotals calls = CallsCounted();
  const uint64_t start_us = NowUs();
  const AllocatorFigures figures = InterpretMallinfo(previous_->mallinfo());
  const uint64_t took_us = NowUs() - start_us;
  // A slow answer puts the next one off, so that the reads take their share of the time at most.
  if (took_us * kAllocatorStatsTimeShare > kAllocatorStatsPeriodUs) {
    next_allocator_stats_us_.store(start_us + took_us * kAllocatorStatsTimeShare,
                                   std::memory_order_relaxed);
  }
  uint64_t unset = 0;
  first_allocator_read_us_.compare_exchange_strong(unset, start_us, std::memory_order_relaxed);
  last_allocator_read_us_.store(start_us, std::memory_order_relaxed);
  last_read_free_blocks_.store(figures.free_blocks, std::memory_order_relaxed);
  last_read_frees_.store(calls.free_count, std::memory_order_relaxed);
  last_read_allocations_.store(calls.alloc_count, std::memory_order_relaxed);
  return figures;
}

bool Client::AllocatorReadFitsShare(uint64_t now_us) const {
  // At most: a program that allocates as much as it frees (which takes free blocks back) gets
  // "not read at exit" from 100k frees in its last ~100 ms; one that freed a large heap at its
  // end, as perl does, does not spend half its run in the walk.
  const uint64_t blocks = FreeBlocksForeseen(true);
  const uint64_t first_us = first_allocator_read_us_.load(std::memory_order_relaxed);
  const uint64_t lived_us = first_us == 0 || now_us < first_us ? 0 : now_us - first_us;
  const uint64_t share_us = std::max(kAllocatorReadFloorUs, lived_us / kAllocatorStatsTimeShare);
  return blocks * kWalkNsPerFreeBlock <= share_us * 1000;
}

void Client::SendAllocatorFigures(const AllocatorFigures& figures) {
  SharedRingBuffer::Reservation r;
  if (!Reserve(0, kRecordAllocatorStats, sizeof(AllocatorStatsRecord), &r)) return;
  AllocatorStatsRecord record{figures.in_use_bytes, figures.free_bytes, figures.system_bytes};
  memcpy(r.body, &record, sizeof(record));
  Publish(r);
}

void Client::WaitUntilDrained(uint32_t timeout_ms) {
  if (!enabled() || !identity_.InOriginalProcess()) return;
  const uint64_t deadline = NowUs() + uint64_t{timeout_ms} * 1000;
  while (rings_->bytes_pending() != 0 && NowUs() < deadline) {
    // The daemon may be asleep, having seen the buffer empty before the last records came.
    if (!Wake()) return;  // gone
    timespec pause{0, 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
}

void Client::Shutdown(ClientStopReason reason) {
  if (!enabled_.exchange(false)) return;
  generation_->fetch_add(1, std::memory_order_release);
  CustomHeaps::StopSession();
  uint32_t running = kClientRunning;
  // Ring 0's says it for the set.
  rings_->ring(0)->metadata()->stop_reason.compare_exchange_strong(running, reason);
  // The daemon sees EOF, drains what is in the buffer and writes this process's last dump.
  if (SocketIsOurs()) shutdown(sock_, SHUT_RDWR);
}

void Client::DisableInChild() {
  enabled_.store(false);
  generation_->fetch_add(1, std::memory_order_release);
  CustomHeaps::StopSession();
  if (SocketIsOurs()) close(sock_);
}

}  // namespace droidheap

// The profiling session as seen from inside the profiled process: the socket to droidheapd, the
// shared ring buffer and the sampling configuration.
//
// Created by heapprofd_initialize (on bionic's loading thread or at libc init) and then used by
// every thread of the process from the malloc hooks, without locks. It is never destroyed: after a
// teardown other threads may still be inside a hook holding it, so it only stops recording (and
// keeps its mapping, a bounded leak of one buffer per session).
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <atomic>

#include "client/process_identity.h"
#include "client/sampled_addresses.h"
#include "common/malloc_dispatch.h"
#include "protocol/heap_totals.h"
#include "protocol/ring_buffer.h"
#include "protocol/ring_set.h"
#include "protocol/snapshot_channel.h"
#include "protocol/stack_matches.h"
#include "protocol/wire_protocol.h"

namespace droidheap {

// The client's tables of sampled blocks, in one mapping: libc's, the custom heaps', then the
// large table of each.
constexpr size_t kSampledTablesBytes =
    2 * (sizeof(SampledAddresses) + sizeof(SampledAddresses::LargeTable));

class Client {
 public:
  // Connects to the daemon at socket_path and performs the handshake, the hello carrying
  // `hello_flags` (HelloFlags). nullptr on any failure.
  static Client* Connect(const char* socket_path, const MallocDispatch* previous,
                         uint64_t hello_flags);

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  uint64_t sampling_interval() const { return config_.sampling_interval; }
  uint64_t random_seed() const { return config_.random_seed; }
  // The addresses of this process's live sampled blocks of libc's heap; lives as long as the
  // client.
  const SampledAddresses* sampled() const { return sampled_; }
  // Where the threads count every allocation and free; nullptr when the daemon keeps no totals.
  // Lives as long as the client.
  SharedTotals* totals() const { return totals_; }
  const ProcessIdentity& identity() const { return identity_; }
  // Whether a forked child is profiled as a process of its own (heapprofd's
  // disable_fork_teardown).
  bool profiles_forked_children() const { return config_.flags & kFlagDisableForkTeardown; }
  // Whether the session records libc's heap, and a custom heap of this name
  // (client/custom_heaps.h).
  bool records_malloc() const { return !(config_.heap_flags & kHeapsSkipMalloc); }
  bool RecordsHeap(const char* name) const;

  // Changes whenever a client starts or stops recording (NewGeneration, Shutdown,
  // DisableInChild): what the hooks' per-thread view of the session is checked against. Once
  // PlaceGeneration has run, where the kernel can, it lives in a page wiped in every child without
  // CLONE_VM: such a child reads 0, a generation no session has, until it starts a session of its
  // own; a child that inherited the hooks without our atfork handler (a raw clone(), or the atfork
  // handlers that run before ours) then counts nowhere, at no cost to the hooks.
  static uint32_t generation() { return generation_->load(std::memory_order_relaxed); }
  // A client was installed.
  static void NewGeneration() { generation_->fetch_add(1, std::memory_order_release); }
  // Once per process, before the first client is installed.
  static void PlaceGeneration();
  // Whether a child without CLONE_VM reads generation 0.
  static bool ChildrenReadGenerationZero() { return generation_ != &kept_generation_; }

  // Hook path, any thread; `heap` is 0 for libc's, else a custom heap's number. The Record*
  // callers hold the thread's re-entrancy guard.
  // A sampled block, right after the allocator returned it.
  void RecordAlloc(uint32_t heap, uint64_t address, uint64_t alloc_size, uint64_t sample_size);
  // Before a block goes back to the allocator: reports its free when the block was sampled, else
  // nothing -- the common case, one table lookup. Reported before the allocator can hand the
  // address out again, the free always comes before a later allocation there in the buffer.
  void RecordFree(uint32_t heap, uint64_t address) {
    SharedRingBuffer::Reservation r;
    if (BeginFree(heap, address, &r)) EndFree(heap, address, r, true);
  }
  // realloc's free, which happens only if the call succeeds: its record is written before the
  // call (so it takes its place in the buffer then) and published after it by EndFree, as a free
  // when `freed`, else (the block lives on, still sampled) as a record the daemon skips. False,
  // nothing reserved, when the block was not sampled.
  bool BeginFree(uint32_t heap, uint64_t address, SharedRingBuffer::Reservation* r);
  void EndFree(uint32_t heap, uint64_t address, const SharedRingBuffer::Reservation& r,
               bool freed);
  // Tells the daemon the name of custom heap `heap`, before its first record.
  void DeclareHeap(uint32_t heap, const char* name);
  // Tells the daemon the hooks and heaps record from now on (kRecordRecording): the process it
  // then reports as profiled misses nothing after that report.
  void AnnounceRecording();
  // What the allocator says it holds (mallinfo), sent at most every 100 ms (less often when
  // reading it is slow); from the sampled path.
  void RecordAllocatorStats();
  // Tells the daemon the process is exiting (kRecordExiting), with what the allocator holds
  // unless reading it would take more than its share of the time; then WaitUntilDrained.
  void AnnounceExit();

  // Waits, at most timeout_ms, until the daemon has read every record written so far: at exit,
  // while it can still read this process's maps (they name the libraries the records' stacks
  // pass through; a library loaded late is known only from them, and they vanish with the
  // process).
  void WaitUntilDrained(uint32_t timeout_ms);
  // Stops recording for good; the process continues on the previous allocator.
  void Shutdown(ClientStopReason reason);
  // In a forked child: the session belongs to the parent.
  void DisableInChild();
  // The snapshot channel's end the daemon sent (kFlagSnapshots), once; -1 when none. Fills
  // `ranges` (room for kMaxProfilerRanges) with the client's own memory, which holds sampled
  // blocks' addresses and copies of stacks: never the program's roots.
  int TakeSnapshotChannel(SnapshotRange* ranges, size_t* range_count);

 private:
  Client(int sock, RingSet* rings, SampledAddresses* sampled,
         SampledAddresses* custom_sampled, SharedTotals* totals, const StackMatches* stack_matches,
         const DaemonReply& config, const ProcessIdentity& identity,
         const MallocDispatch* previous);
  SampledAddresses* SampledOf(uint32_t heap) const {
    return heap == 0 ? sampled_ : custom_sampled_;
  }
  // Custom heaps share one table: the heap's number in the top byte keeps a block of one heap
  // apart from a block of another at the same address (a pool's first block and the malloc'd
  // arena it is cut from).
  static uint64_t SampledKey(uint32_t heap, uint64_t address) {
    return address ^ (uint64_t{heap} << 56);
  }
  // A record's sequence number (AllocRecord, FreeRecord): its place in its ring, which orders a
  // sampled block's allocation and free (both in that ring) for the daemon without a counter of
  // its own that every sample would take from the other cores.
  static uint64_t SequenceOf(const SharedRingBuffer::Reservation& r) { return r.position + 1; }
  // The ring a sample of `heap` by this thread goes to: the thread's own (each thread is given
  // the next ring at its first sample) for libc's heap while its table holds every sampled block
  // (so that the block's free can follow it there), at -i 1 once other threads share its first
  // one; else ring 0, in the order of the calls.
  uint32_t RingOf(uint32_t heap);
  // Reserves a record in `ring`; when the ring is full, waits for the daemon (ReserveAfter) or
  // ends the session. False when nothing was reserved.
  bool Reserve(uint32_t ring, uint32_t type, size_t body_size, SharedRingBuffer::Reservation* out);
  // Out of line: a first try that did not reserve (`result`), and the waits and tries after it.
  __attribute__((noinline)) bool ReserveAfter(SharedRingBuffer::ReserveResult result,
                                              SharedRingBuffer* buffer, uint32_t type,
                                              size_t body_size,
                                              SharedRingBuffer::Reservation* out);
  // Reserves an allocation's or a free's record (`malloc_type`) of `heap` in `ring`: libc's as is,
  // a custom heap's as its kRecordHeap* type behind a HeapTag. Returns where the body goes;
  // nullptr when nothing was reserved.
  uint8_t* ReserveRecord(uint32_t ring, uint32_t heap, RecordType malloc_type, size_t body_size,
                         SharedRingBuffer::Reservation* r);
  void Publish(const SharedRingBuffer::Reservation& r);
  // Whether sock_ is still the socket Connect made: the program may have closed it (a daemon
  // closing every descriptor, closefrom) and the number may now be a file or socket of its own,
  // which must never get the profiler's bytes or be shut down by it.
  bool SocketIsOurs() const;
  // Nudges the daemon awake; false when it is gone or the socket is no longer ours.
  bool Wake();
  // The top of the stack `sp` is on (false: on none this thread knows). Inline, the thread's own
  // stack; out of line, its first sample (the bounds found) and a signal's alternate stack.
  bool StackBounds(uint64_t sp, uint64_t* top);
  __attribute__((noinline)) bool StackBoundsElsewhere(uint64_t sp, uint64_t* top);
  // RecordAllocatorStats once they are due (`due`: the time it read), out of line.
  __attribute__((noinline)) void SendAllocatorStats(uint64_t now_us, uint64_t due);
  // The allocator's figures, read now; what the read cost and found spaces the next ones.
  AllocatorFigures ReadAllocatorFigures();
  void SendAllocatorFigures(const AllocatorFigures& figures);
  // Whether a read now (at exit) may take as long as its walk of free blocks would.
  bool AllocatorReadFitsShare(uint64_t now_us) const;
  // The free blocks a read now would walk (kMallinfoWalksFreeBlocks; else 0), from those of the
  // last read and the calls counted since: one more a free at most, or, likely, one more a free
  // that no allocation took back.
  uint64_t FreeBlocksForeseen(bool at_most) const;
  // The totals of libc's calls, where the allocator's figures are walked; else none.
  HeapTotals CallsCounted() const;

  int sock_;
  dev_t sock_dev_;
  ino_t sock_ino_;
  RingSet* rings_;
  SampledAddresses* sampled_;
  SampledAddresses* custom_sampled_;
  SharedTotals* totals_;
  const StackMatches* stack_matches_;  // nullptr: every sample's stack is copied
  DaemonReply config_;
  ProcessIdentity identity_;
  const MallocDispatch* previous_;
  int snapshot_channel_ = -1;
  std::atomic<bool> enabled_{true};
  std::atomic<uint64_t> next_allocator_stats_us_{0};
  // The allocator's reads (ReadAllocatorFigures): when the first and the last were, the free
  // blocks the last one walked and the calls counted then.
  std::atomic<uint64_t> first_allocator_read_us_{0};
  std::atomic<uint64_t> last_allocator_read_us_{0};
  std::atomic<uint64_t> last_read_free_blocks_{0};
  std::atomic<uint64_t> last_read_frees_{0};
  std::atomic<uint64_t> last_read_allocations_{0};
  // Where in each ring the next sample looks whether a sleeping daemon has a batch to read
  // (Publish); written once a batch, on a line of its own: each by its ring's threads.
  struct alignas(64) WakeCheck {
    std::atomic<uint64_t> next{0};
  };
  WakeCheck next_wake_check_[RingSet::kMaxRings];
  static std::atomic<uint32_t> kept_generation_;  // where the kernel wipes nothing
  // Hidden in the declaration too: the hooks then read it without a look in the GOT.
  __attribute__((visibility("hidden"))) static std::atomic<uint32_t>* generation_;
};

}  // namespace droidheap

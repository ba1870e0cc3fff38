// Everything the daemon holds for one connected process: its socket, the fds it passed at the
// handshake, the shared ring buffer, its memory map and its bookkeeping. Created by the main
// thread at the handshake, then moved to, and owned by, one unwinding worker.
#pragma once

#include <stdint.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/callstack_table.h"
#include "daemon/drain_budgets.h"
#include "daemon/dump_snapshot.h"
#include "daemon/heap_tracker.h"
#include "daemon/process_memory.h"
#include "daemon/unreachable_heap.h"
#include "daemon/unwound_stack_cache.h"
#include "protocol/heap_totals.h"
#include "protocol/ring_buffer.h"
#include "protocol/ring_set.h"
#include "protocol/stack_matches.h"
#include "protocol/wire_protocol.h"
#include "reachability/process_snapshot.h"
#include "unwinder/process_maps.h"
#include "unwinder/registers.h"

namespace droidheap {

// Bytes of each of a client's rings: read, or written by some moment. The worker's own counts,
// which marks are set against: a ring's positions lie in memory the client can write, and move
// back.
using RingBytes = std::array<uint64_t, RingSet::kMaxRings>;

struct ClientConnection {
  ~ClientConnection() {
    for (int fd : {sock, maps_fd, mem_fd}) {
      if (fd >= 0) close(fd);
    }
  }

  // What it has written by now, ring by ring: a mark to read up to.
  RingBytes WrittenMark() const {
    RingBytes mark{};
    for (uint32_t i = 0; i < rings->count(); ++i) {
      const SharedRingBuffer& ring = *rings->ring(i);
      // Both positions are the client's to write: never more than a ring holds.
      mark[i] = consumed[i] + std::min<uint64_t>(ring.bytes_pending(), ring.data_size());
    }
    return mark;
  }
  // Whether every ring was read up to `mark`.
  bool ReadUpTo(const RingBytes& mark) const {
    for (size_t i = 0; i < mark.size(); ++i) {
      if (consumed[i] < mark[i]) return false;
    }
    return true;
  }

  int pid = 0;
  std::string cmdline;
  std::string exe;  // its program's file, as it connected (ProcessMatcher::ExecedFrom)
  // The ABI the process runs (its ClientHello's): how to read its records' registers and stack.
  const RegisterLayout* layout = &kNativeLayout;
  // The protocol version of its ClientHello: how its records are laid out (wire_protocol.h).
  uint32_t version = kProtocolVersion;
  int sock = -1;
  int maps_fd = -1;
  int mem_fd = -1;
  // Its rings: one, or from protocol 13 one per few threads (ring_set.h).
  std::unique_ptr<RingSet, RingSet::Deleter> rings;
  // Its exact totals; none for a client older than protocol 4.
  std::unique_ptr<SharedTotals, SharedTotals::Deleter> totals;
  // The call paths published back to it (stack_matches.h); none for a client older than
  // protocol 10. What each id it names stands for: the call stack booked, and the unwind's error
  // and booked pcs (the stack log's).
  std::unique_ptr<StackMatches, StackMatches::Deleter> stack_matches;
  struct PublishedMatch {
    uint32_t callstack;
    UnwindError error;
    std::vector<uint64_t> logged_pcs;
    size_t slot;  // where it is published (or was last)
  };
  std::vector<PublishedMatch> published_matches;
  uint64_t stack_matches_generation = 0;  // the maps generation its entries were unwound with
  uint64_t start_timestamp_ns = 0;  // CLOCK_MONOTONIC_COARSE, at the handshake
  bool from_startup = false;

  // Worker state.
  bool socket_closed = false;
  // Its socket held more wake-up bytes than a round reads: not polled until then (MonotonicUs).
  uint64_t socket_quiet_until_us = 0;
  // The record after consumed_bytes was put off this many times, its unwind short of files' tables
  // that the worker's share of time did not cover (UnwindingWorker::HandleAlloc). The next drain
  // starts at its ring (next_ring).
  uint64_t put_off_at = UINT64_MAX;
  int put_off_times = 0;
  bool buffer_corrupted = false;
  bool hit_guardrail = false;  // ended at the session's memory cap
  // Ended for keeping the worker from reading its buffer up to a mark within its budget: a dump's
  // (what it had written when the dump was asked) or its last one's (when its socket closed).
  bool stalled = false;
  // Bytes of records read from each ring since it connected, and from all of them; the ring the
  // worker reads first in its next drain (where the last one stopped short).
  RingBytes consumed{};
  uint64_t consumed_bytes = 0;
  uint32_t next_ring = 0;
  // Its socket closed: it is read up to last_mark (what it had written then), never until its
  // buffer is empty (a process behind a closed socket may go on writing), within the worker's
  // last-drain budget (last_drain_time), then given its final dump and forgotten.
  bool closing = false;
  RingBytes last_mark{};
  DrainTime last_drain_time;
  bool recording = false;      // its kRecordRecording was read
  uint64_t booked_bytes = 0;   // its part of the session's memory, as last counted
  ProcessMaps maps;
  CallstackTable callstacks;
  UnwoundStackCache stack_cache;
  // Its heaps: libc's, and the custom heaps it named (HeapNameRecord) by number.
  HeapTracker malloc_heap;
  struct CustomHeap {
    std::string name;
    HeapTracker tracker;
  };
  std::map<uint32_t, CustomHeap> custom_heaps;
  // What each map entry books as, by its index in maps.entries(): the callstacks' mapping index,
  // kProfilerMapping for the profiler's own libraries, kNotYetSeen. Valid while
  // maps.generation() == mapping_ids_generation.
  static constexpr uint32_t kProfilerMapping = UINT32_MAX;
  static constexpr uint32_t kNotYetSeen = UINT32_MAX - 1;
  std::vector<uint32_t> mapping_ids;
  uint64_t mapping_ids_generation = 0;
  uint64_t unwinding_errors = 0;
  uint64_t heap_samples = 0;
  // Of them: booked from a MatchedAllocRecord (the process sent no stack), and unwound afresh; the
  // rest were found in stack_cache.
  uint64_t matched_samples = 0;
  uint64_t unwound_samples = 0;
  uint64_t map_reparses = 0;
  uint64_t unwinding_time_us = 0;  // draining its records: unwinding, mostly, and booking
  // Its kRecordExiting was read: it exited, rather than lost its connection. Its memory was read
  // then, while it waited in its exit path (process_memory.h): its exit dump comes after the
  // process, and its memory, are gone.
  bool exiting = false;
  // Its socket closed without its exit path while the process lives on as another program: it
  // exec'd (ProcessMatcher::ExecedFrom), no crash and no kill.
  bool execed = false;
  ProcessMemory memory_at_exit;
  // What its allocator last said it holds (its AllocatorStatsRecords), and whether its exit
  // path skipped the reading (kExitingAllocatorNotRead): the last is then older than its exit.
  std::optional<AllocatorStatsRecord> allocator;
  bool allocator_not_read_at_exit = false;
  // --unreachable, protocol 11: the channel its snapshots come through, the snapshot taken and not
  // yet swept (swept once its records are read up to snapshot_mark, what it had written when its
  // threads were held), and the latest sweep's verdict: its figures, and its blocks by call stack.
  std::unique_ptr<SnapshotChannel> snapshots;
  std::unique_ptr<ProcessSnapshot> snapshot;
  RingBytes snapshot_mark{};
  uint64_t snapshot_timestamp_ns = 0;
  int sweeps_in_flight = 0;  // handed to the sweeper, not yet booked: its dumps wait for them
  UnreachableReport unreachable;
  UnreachableHeap unreachable_heap;
};

}  // namespace droidheap

// --unreachable: at each dump, and as a process exits, its memory is copied at one instant
// (reachability/process_snapshot.h); once the worker has read every record the process wrote
// before that instant, its live sampled blocks of libc's heap are handed, with the copy, to the
// worker's sweeper thread (unreachable_sweeper.h), which sweeps them (reachability/heap_sweep.h,
// root_ranges.h) while the worker reads on; the worker books the outcome, the blocks nothing
// reaches by call stack, in the client's UnreachableReport and UnreachableHeap, which its dumps
// carry.
//
// TakeUnreachableSnapshot, StartSweep and BookSweep run on the unwinding worker's thread, Sweep on
// the sweeper's.
#pragma once

#include <stdint.h>

#include <memory>
#include <vector>

#include "daemon/client_connection.h"
#include "daemon/daemon_config.h"
#include "daemon/heap_tracker.h"

namespace droidheap {

class UnreachableSweeper;

// Takes the client's snapshot now, unless one waits to be swept or the client has no snapshot
// channel; what it had written while its threads were held is the snapshot's mark. True
// when a snapshot waits to be swept afterwards. A snapshot that cannot be taken is said in the
// client's report (and the dump goes on without it). Unless every block is known from the
// samples, the copy lists the heap's blocks where its allocator can (bionic's): then the sweep
// follows pointers through the blocks not sampled too, and finds the sampled blocks of a dropped
// list or cycle as unreachable as LeakSanitizer would.
bool TakeUnreachableSnapshot(const DaemonConfig& config, ClientConnection* client,
                             uint64_t timestamp_ns);

// Whether the client's snapshot still waits for records written before it (a client cut off
// meanwhile waits for nothing: its snapshot is dropped unswept).
inline bool SnapshotAwaitsRecords(const ClientConnection& client) {
  return client.snapshot != nullptr && !client.ReadUpTo(client.snapshot_mark) &&
         !client.buffer_corrupted && !client.hit_guardrail && !client.stalled;
}

// What a sweep needs, taken from the client when every record before its snapshot is read.
struct SweepJob {
  const ClientConnection* client = nullptr;  // whose: to book the outcome; the sweeper never reads it
  int pid = 0;
  std::unique_ptr<ProcessSnapshot> snapshot;
  std::vector<LiveSample> sampled;
  uint32_t word_size = 8;
  UnreachableReport report;  // what is known before the sweep: when, the hold, complete
};

struct SweepOutcome {
  const ClientConnection* client = nullptr;
  UnreachableReport report;
  std::vector<UnreachableSample> found;  // by call stack of the client's CallstackTable
};

// Hands the client's snapshot to `sweeper` once every record written before it is read
// (SnapshotAwaitsRecords false); the client counts it in sweeps_in_flight until BookSweep. A
// client cut off before that is not swept (its live blocks are not known as they were): its
// report says so at once. Nothing to do without a snapshot.
void StartSweep(const DaemonConfig& config, ClientConnection* client,
                UnreachableSweeper* sweeper);

// The sweep itself: the copy's roots, the sampled blocks (with the allocator's, when listed)
// marked, the unreachable sampled ones summed by call stack.
SweepOutcome Sweep(SweepJob job);

// Books an outcome in the client it is for: its report, its unreachable heap, the log line.
void BookSweep(SweepOutcome outcome, ClientConnection* client);

}  // namespace droidheap

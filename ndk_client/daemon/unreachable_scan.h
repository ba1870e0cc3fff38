// --unreachable: at each dump, and as a process exits, its memory is copied at one instant
// (reachability/process_snapshot.h); once the worker has read every record the process wrote
// before that instant, its live sampled blocks of libc's heap are swept against the copy
// (reachability/heap_sweep.h, root_ranges.h), and those nothing reaches are booked by call stack
// in the client's UnreachableReport, which its dumps carry (dump_snapshot.h).
//
// Called by the unwinding worker that owns the client, on its thread.
#pragma once

#include <stdint.h>

#include <functional>

#include "daemon/client_connection.h"
#include "daemon/daemon_config.h"

namespace droidheap {

// Takes the client's snapshot now, unless one waits to be swept or the client has no snapshot
// channel; `mark_now`, called while its threads are held, says what it had written by then. True
// when a snapshot waits to be swept afterwards. A snapshot that cannot be taken is said in the
// client's report (and the dump goes on without it). Unless every block is known from the
// samples, the copy lists the heap's blocks where its allocator can (bionic's): then the sweep
// follows pointers through the blocks not sampled too, and finds the sampled blocks of a dropped
// list or cycle as unreachable as LeakSanitizer would.
bool TakeUnreachableSnapshot(const DaemonConfig& config, ClientConnection* client,
                             uint64_t timestamp_ns, const std::function<uint64_t()>& mark_now);

// Whether the client's snapshot still waits for records written before it (a client cut off
// meanwhile waits for nothing: its snapshot is dropped unswept).
inline bool SnapshotAwaitsRecords(const ClientConnection& client) {
  return client.snapshot != nullptr && client.consumed_bytes < client.snapshot_mark &&
         !client.buffer_corrupted && !client.hit_guardrail && !client.stalled;
}

// Sweeps the client's snapshot once every record written before it is read (SnapshotAwaitsRecords
// false), then lets the copy go. A client cut off before that is not swept: its live blocks are not
// known as they were. Nothing to do without a snapshot.
void SweepUnreachable(const DaemonConfig& config, ClientConnection* client);

}  // namespace droidheap

// The one thread the client starts, and only for a session that looks for unreachable memory: it
// waits on the snapshot channel (protocol/snapshot_channel.h) and, when droidheapd has stopped
// every other thread of the process and asks, forks the copy of the process that the daemon's
// sweep reads while the program runs on.
//
// The thread owns its channel end and a small context it maps for itself (nothing on the
// program's heap); it ends when the channel closes (the session ended, the daemon died), and a
// forked child of the program never has it (fork copies the calling thread only).
#pragma once

#include <stddef.h>

#include "common/malloc_dispatch.h"
#include "protocol/snapshot_channel.h"

namespace droidheap {

// Starts the thread on `channel`, which it then owns; `ranges` are the profiler's memory (never
// the program's roots); `allocator`, the allocator under the client, lists the heap's blocks in
// the copy where it can (kAllocatorListsBlocks; nullptr: never). The caller makes sure the
// thread's creation is not sampled. False, the channel closed, when it cannot start.
bool StartSnapshotThread(int channel, const SnapshotRange* ranges, size_t range_count,
                         const MallocDispatch* allocator);

// In a forked child of the program (an atfork child handler), which has no snapshot thread:
// closes the thread's channel and unmaps its context, which the child would otherwise keep.
void ForgetSnapshotThreadInChild();

}  // namespace droidheap

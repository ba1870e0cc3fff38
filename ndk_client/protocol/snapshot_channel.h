// The snapshot channel: how droidheapd has a profiled process fork a copy of itself, the
// consistent picture of its memory that the unreachable-memory sweep reads (daemon/
// unreachable_scan.h) while the process runs on.
//
// A SOCK_SEQPACKET pair the daemon makes when the session looks for unreachable memory; its end
// for the process comes last with the DaemonReply (kFlagSnapshots). The client's snapshot thread
// (client/snapshot_thread.h) owns that end:
//
//   thread -> daemon  SnapshotHello, once: the thread's id (the one thread the daemon leaves
//                     running when it stops the others)
//   daemon -> thread  SnapshotRequest: "your other threads are stopped: fork now"
//   copy   -> daemon  SnapshotReady + SCM_RIGHTS{/proc/self/mem, maps, pagemap, lifeline}, sent
//                     by the forked copy itself (its own mem, which a non-dumpable process may
//                     open where nobody else may); or SnapshotReady with status failed, no fds,
//                     from the thread
//
// The copy then waits for the lifeline's other end, held by the daemon, to close: when the sweep
// is done, or when the daemon dies. It is a clone child with no exit signal, which a program's
// wait() for its own children never sees, and the thread reaps it. Every message is one packet
// of a fixed-size struct, versioned as wire_protocol.h's.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace droidheap {

constexpr uint32_t kSnapshotMagic = 0x50414e53;  // "SNAP"
constexpr uint32_t kSnapshotVersion = 1;

struct alignas(8) SnapshotHello {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  int32_t tid;  // the snapshot thread's
};
static_assert(sizeof(SnapshotHello) == 16, "wire layout");

struct alignas(8) SnapshotRequest {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  uint32_t reserved;
  uint64_t id;  // echoed in the SnapshotReady
};
static_assert(sizeof(SnapshotRequest) == 24, "wire layout");

enum SnapshotStatus : uint32_t {
  kSnapshotTaken = 0,
  kSnapshotForkFailed = 1,  // errno in `error`: the fork, or opening what the copy sends
};

// Ranges of the process's memory that are the profiler's, not the program's: its tables of
// sampled addresses, the shared buffers (copies of stacks), the snapshot thread's stack. Never
// roots: they hold every sampled block's address.
constexpr size_t kMaxProfilerRanges = 8;

struct alignas(8) SnapshotRange {
  uint64_t start;
  uint64_t end;
};

struct alignas(8) SnapshotReady {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  uint32_t status;  // SnapshotStatus
  uint64_t id;      // the request's
  int32_t copy_pid;
  int32_t error;
  uint32_t range_count;
  uint32_t reserved;
  SnapshotRange profiler_ranges[kMaxProfilerRanges];
  // An address on the snapshot thread's stack: the mapping that holds it is the profiler's too.
  uint64_t thread_stack;
  // A word of the copy's and its value: the daemon reads the copy's memory only if it finds the
  // value there (under qemu-user a 32-bit guest's addresses are not the host's, and its mem file
  // is the host's).
  uint64_t probe_address;
  uint64_t probe_value;
};
static_assert(sizeof(SnapshotReady) == 40 + 16 * kMaxProfilerRanges + 24, "wire layout");

}  // namespace droidheap

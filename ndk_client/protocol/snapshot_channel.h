// The snapshot channel: how droidheapd has a profiled process fork a copy of itself, the
// consistent picture of its memory that the unreachable-memory sweep reads (daemon/
// unreachable_scan.h) while the process runs on.
//
// A SOCK_SEQPACKET pair the daemon makes when the session looks for unreachable memory; its end
// for the process comes last with the DaemonReply (kFlagSnapshots). The client's snapshot thread
// (client/snapshot_thread.h) owns that end:
//
//   thread -> daemon  SnapshotHello, once: the thread's id (the one thread the daemon leaves
//                     running when it stops the others), and whether its allocator can list its
//                     blocks (bionic's malloc_iterate)
//   daemon -> thread  SnapshotRequest kSnapshotHoldAllocator, when the copy is to list the heap's
//                     blocks: the thread calls the allocator's malloc_disable, so that no thread
//                     the daemon then stops holds an allocator lock, and answers SnapshotReady
//                     kSnapshotAllocatorHeld. It lets the allocator go (malloc_enable) once it has
//                     forked, or after kAllocatorHoldMs without a request, or when the channel
//                     closes: a daemon that dies never leaves the program's malloc blocked.
//   daemon -> thread  SnapshotRequest kSnapshotFork or kSnapshotForkAndList: "your other threads
//                     are stopped: fork now"
//   copy   -> daemon  SnapshotReady + SCM_RIGHTS{/proc/self/mem, maps, pagemap, lifeline}, sent
//                     by the forked copy itself (its own mem, which a non-dumpable process may
//                     open where nobody else may); or SnapshotReady with status failed, no fds,
//                     from the thread
//   copy   -> daemon  (kSnapshotForkAndList) SnapshotBlocks, until one with kBlocksLast: every
//                     block the allocator holds in its heap's mappings, as malloc_iterate gives
//                     them (in the copy, where the allocator is still held)
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
constexpr uint32_t kSnapshotVersion = 2;
// How long the snapshot thread holds the allocator for a fork that is not asked for.
constexpr int kAllocatorHoldMs = 1000;

enum SnapshotHelloFlags : uint32_t {
  kHelloCanListBlocks = 1,  // its allocator has malloc_iterate (bionic's)
};

struct alignas(8) SnapshotHello {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  int32_t tid;  // the snapshot thread's
  uint32_t flags;  // SnapshotHelloFlags
  uint32_t reserved;
};
static_assert(sizeof(SnapshotHello) == 24, "wire layout");

enum SnapshotRequestKind : uint32_t {
  kSnapshotFork = 0,
  kSnapshotHoldAllocator = 1,
  kSnapshotForkAndList = 2,  // fork; the copy lists the heap's blocks
};

struct alignas(8) SnapshotRequest {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  uint32_t kind;  // SnapshotRequestKind
  uint64_t id;  // echoed in the SnapshotReady
};
static_assert(sizeof(SnapshotRequest) == 24, "wire layout");

enum SnapshotStatus : uint32_t {
  kSnapshotTaken = 0,
  kSnapshotForkFailed = 1,  // errno in `error`: the fork, or opening what the copy sends
  kSnapshotAllocatorHeld = 2,
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

// Blocks of the heap, as the copy's malloc_iterate gives them: `count` of them in `blocks`
// (address, address + size).
constexpr size_t kBlocksPerMessage = 2048;

enum SnapshotBlocksFlags : uint32_t {
  kBlocksLast = 1,         // the list ends with these
  kBlocksUnsupported = 2,  // (with kBlocksLast) the allocator would not list them: errno in error
};

struct alignas(8) SnapshotBlocks {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  uint32_t count;
  uint64_t id;  // the request's
  uint32_t flags;  // SnapshotBlocksFlags
  int32_t error;
  SnapshotRange blocks[kBlocksPerMessage];
};
static_assert(sizeof(SnapshotBlocks) == 32 + 16 * kBlocksPerMessage, "wire layout");

}  // namespace droidheap

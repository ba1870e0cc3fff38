// The daemon's end of the snapshot channel (protocol/snapshot_channel.h): it holds a process's
// threads still (ThreadStopper), has the process's snapshot thread fork a copy of it, and lets the
// threads go: the program stalls for a thread stop and a fork, whatever its heap holds. The copy
// (its memory, its maps, the threads' registers as they were) is what a sweep reads afterwards,
// while the program runs on.
//
// A SnapshotChannel is owned by the unwinding worker that owns the client (ptrace binds the
// threads it holds to the worker's thread); not thread-safe. The ProcessSnapshot it takes moves
// to the worker's sweeper thread, and its copy exits when the snapshot is destroyed there.
#pragma once

#include <stdint.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "protocol/snapshot_channel.h"
#include "reachability/heap_sweep.h"
#include "reachability/thread_stopper.h"
#include "unwinder/process_maps.h"
#include "unwinder/registers.h"

namespace droidheap {

// A forked copy of a process, kept until destroyed: then the copy exits.
struct ProcessSnapshot {
  ProcessSnapshot() = default;
  ProcessSnapshot(const ProcessSnapshot&) = delete;
  ProcessSnapshot& operator=(const ProcessSnapshot&) = delete;
  ~ProcessSnapshot();

  int copy_pid = 0;
  int mem_fd = -1;    // the copy's /proc/self/mem
  int pagemap_fd = -1;  // ... and its /proc/self/pagemap
  int lifeline = -1;  // closing it lets the copy exit
  ProcessMaps maps;   // the copy's, as it was forked
  // The program's threads as they were held (none when they could not be: `threads_held`).
  std::vector<ThreadStopper::Thread> threads;
  bool threads_held = false;
  // Why the threads could not be held, or what else was not as it should be; empty when all was.
  std::string note;
  std::vector<SnapshotRange> profiler_ranges;
  uint64_t thread_stack = 0;  // an address on the snapshot thread's stack
  uint64_t stall_us = 0;      // from the first thread held to the last let go
  // Every block of the heap as the copy's allocator listed them (bionic's malloc_iterate), when
  // `blocks_listed`; else why not is in `note`, or the listing was not asked for.
  bool blocks_listed = false;
  std::vector<HeapBlock> heap_blocks;
};

// Reads a ProcessSnapshot's memory: the copy's /proc/self/mem.
class SnapshotMemory : public MemorySource {
 public:
  explicit SnapshotMemory(int mem_fd) : mem_fd_(mem_fd) {}
  size_t Read(uint64_t address, void* out, size_t size) override;

 private:
  int mem_fd_;
};

class SnapshotChannel {
 public:
  explicit SnapshotChannel(int fd) : fd_(fd) {}
  SnapshotChannel(const SnapshotChannel&) = delete;
  SnapshotChannel& operator=(const SnapshotChannel&) = delete;
  ~SnapshotChannel();

  // Holds process `pid`'s threads (all but the snapshot thread), calls `while_stopped` (where
  // what must agree with the copy is read: the records written so far), has the copy forked and
  // lets the threads go. A process whose threads cannot be held (no ptrace: permissions, qemu-user)
  // is copied as it runs, said in the snapshot's `note`. nullptr, with a one-line reason in
  // *error, when no copy was made (the thread never answered, the channel is closed); the threads
  // are then let go too. With `list_blocks`, where the process's allocator can, the copy lists
  // every block of its heap (the threads are held after the allocator is: no lock of it held),
  // read once the threads are let go, at most `max_blocks` of them.
  std::unique_ptr<ProcessSnapshot> Take(int pid, const RegisterLayout& layout,
                                        const std::function<void()>& while_stopped,
                                        bool list_blocks, size_t max_blocks, std::string* error);

 private:
  // The snapshot thread's id, from its SnapshotHello (waited for up to `timeout_ms`).
  bool ReadHello(int timeout_ms, std::string* error);
  bool Ask(SnapshotRequestKind kind, uint64_t id);
  // The SnapshotReady that answers request `id` (earlier answers, given up on, are dropped), with
  // its fds (none expected: the rest closed).
  bool ReceiveAnswer(uint64_t id, int timeout_ms, SnapshotReady* ready, int* fds, size_t max_fds,
                     size_t* fd_count, std::string* error);
  bool ReceiveReady(uint64_t id, int timeout_ms, ProcessSnapshot* snapshot, std::string* error);
  // Holds the allocator for a listing: true once it is held.
  bool HoldAllocator(std::string* why_not);
  // The copy's list of blocks, into `snapshot` (or why not, in its note).
  void ReceiveBlocks(uint64_t id, size_t max_blocks, ProcessSnapshot* snapshot);

  int fd_;
  int thread_tid_ = 0;
  bool can_list_blocks_ = false;  // its SnapshotHello said so
  // Why the thread never said hello: every later Take fails at once with it.
  std::string broken_;
  uint64_t next_id_ = 1;
};

}  // namespace droidheap

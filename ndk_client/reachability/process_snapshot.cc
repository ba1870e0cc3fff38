#include "reachability/process_snapshot.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <initializer_list>
#include <utility>

#include "daemon/clock.h"
#include "protocol/fd_passing.h"
#include "reachability/block_list.h"
#include "unwinder/proc_files.h"

namespace droidheap {
namespace {

// How long the snapshot thread may take to answer: a fork of a large process copies its page
// tables (tens of milliseconds for a GiB); the threads stay held meanwhile.
constexpr int kReadyTimeoutMs = 2000;
constexpr int kHelloTimeoutMs = 1000;
// The allocator is held within a few microseconds, unless a thread is inside it: it is let go
// within that thread's call.
constexpr int kHoldTimeoutMs = 200;
// The copy lists blocks at tens of millions a second; the worker, which reads them, reads no
// process's records meanwhile: a listing that takes longer is given up (the sweep goes on with the
// sampled blocks).
constexpr int kListTimeoutMs = 5000;
// How long the threads may take to stop: a thread in an uninterruptible sleep stops only when it
// returns from it, and is then left running (its registers unknown, its whole stack a root).
constexpr uint64_t kStopTimeoutUs = 200 * 1000;

bool WaitReadable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return n > 0;
}

}  // namespace

ProcessSnapshot::~ProcessSnapshot() {
  for (int fd : {mem_fd, pagemap_fd, lifeline}) {
    if (fd >= 0) close(fd);
  }
}

size_t SnapshotMemory::Read(uint64_t address, void* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(mem_fd_, static_cast<uint8_t*>(out) + done, size - done,
                            static_cast<off_t>(address + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

SnapshotChannel::~SnapshotChannel() {
  if (fd_ >= 0) close(fd_);
}

bool SnapshotChannel::ReadHello(int timeout_ms, std::string* error) {
  if (thread_tid_ > 0) return true;
  SnapshotHello hello{};
  if (!broken_.empty() || !WaitReadable(fd_, timeout_ms) ||
      recv(fd_, &hello, sizeof(hello), MSG_DONTWAIT) != static_cast<ssize_t>(sizeof(hello)) ||
      hello.magic != kSnapshotMagic || hello.tid <= 0) {
    broken_ = "its snapshot thread did not start";
    *error = broken_;
    return false;
  }
  thread_tid_ = hello.tid;
  can_list_blocks_ = hello.version >= 2 && (hello.flags & kHelloCanListBlocks) != 0;
  return true;
}

bool SnapshotChannel::Ask(SnapshotRequestKind kind, uint64_t id) {
  const SnapshotRequest request{kSnapshotMagic, kSnapshotVersion, sizeof(SnapshotRequest), kind,
                                id};
  return send(fd_, &request, sizeof(request), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(sizeof(request));
}

bool SnapshotChannel::ReceiveAnswer(uint64_t id, int timeout_ms, SnapshotReady* ready, int* fds,
                                    size_t max_fds, size_t* fd_count, std::string* error) {
  const uint64_t deadline_us = MonotonicUs() + static_cast<uint64_t>(timeout_ms) * 1000;
  for (;;) {
    const uint64_t now_us = MonotonicUs();
    if (now_us >= deadline_us ||
        !WaitReadable(fd_, static_cast<int>((deadline_us - now_us) / 1000) + 1)) {
      *error = "its snapshot thread did not answer within " + std::to_string(timeout_ms) + " ms";
      return false;
    }
    *ready = SnapshotReady();
    *fd_count = 0;
    bool truncated;
    const ssize_t n = ReceiveWithFds(fd_, ready, sizeof(*ready), MSG_DONTWAIT, &truncated,
                                     [&](int fd) {
                                       if (*fd_count < max_fds) {
                                         fds[(*fd_count)++] = fd;
                                       } else {
                                         close(fd);
                                       }
                                     });
    if (n == 0) {
      *error = "its snapshot channel closed";
      return false;
    }
    // Anything else is an answer to an earlier request, given up on, or a list of its blocks.
    if (n == static_cast<ssize_t>(sizeof(*ready)) && !truncated &&
        ready->magic == kSnapshotMagic && ready->size == sizeof(*ready) && ready->id == id) {
      return true;
    }
    for (size_t i = 0; i < *fd_count; ++i) close(fds[i]);
  }
}

bool SnapshotChannel::ReceiveReady(uint64_t id, int timeout_ms, ProcessSnapshot* snapshot,
                                   std::string* error) {
  SnapshotReady ready;
  constexpr size_t kFds = 4;  // mem, maps, pagemap, lifeline
  int fds[kFds] = {-1, -1, -1, -1};
  size_t count = 0;
  if (!ReceiveAnswer(id, timeout_ms, &ready, fds, kFds, &count, error)) return false;
  if (ready.status != kSnapshotTaken || count != kFds || ready.copy_pid <= 0) {
    for (size_t i = 0; i < count; ++i) close(fds[i]);
    *error = std::string("it could not fork its copy: ") + strerror(ready.error);
    return false;
  }
  snapshot->copy_pid = ready.copy_pid;
  snapshot->mem_fd = fds[0];
  snapshot->pagemap_fd = fds[2];
  snapshot->lifeline = fds[3];
  // The process is hostile: what it sent must be the copy's own files, not a pipe or a device
  // that would keep the daemon reading.
  const bool own = MemIsProcessOwn(fds[0], ready.copy_pid) &&
                   MapsAreProcessOwn(fds[1], ready.copy_pid) &&
                   PagemapIsProcessOwn(fds[2], ready.copy_pid);
  const bool maps_read = own && snapshot->maps.Reload(fds[1]);
  close(fds[1]);
  if (!maps_read) {
    *error = own ? "its copy's maps could not be read" : "it sent files that are not its copy's";
    return false;
  }
  uint64_t probe = 0;  // a uint64_t in the copy, whatever its ABI
  if (SnapshotMemory(snapshot->mem_fd).Read(ready.probe_address, &probe, sizeof(probe)) !=
          sizeof(probe) ||
      probe != ready.probe_value) {
    *error = "its memory cannot be read at its own addresses (qemu-user runs it elsewhere)";
    return false;
  }
  const size_t ranges = ready.range_count < kMaxProfilerRanges ? ready.range_count
                                                                : kMaxProfilerRanges;
  snapshot->profiler_ranges.assign(ready.profiler_ranges, ready.profiler_ranges + ranges);
  snapshot->thread_stack = ready.thread_stack;
  return true;
}

bool SnapshotChannel::HoldAllocator(std::string* why_not) {
  const uint64_t id = next_id_++;
  SnapshotReady ready;
  int fds[1];
  size_t count = 0;
  if (!Ask(kSnapshotHoldAllocator, id)) {
    *why_not = "its snapshot channel is closed";
    return false;
  }
  if (!ReceiveAnswer(id, kHoldTimeoutMs, &ready, fds, 1, &count, why_not)) return false;
  for (size_t i = 0; i < count; ++i) close(fds[i]);
  if (ready.status != kSnapshotAllocatorHeld) {
    *why_not = std::string("its allocator could not be held: ") + strerror(ready.error);
    return false;
  }
  return true;
}

void SnapshotChannel::ReceiveBlocks(uint64_t id, size_t max_blocks, ProcessSnapshot* snapshot) {
  const uint64_t deadline_us = MonotonicUs() + uint64_t{kListTimeoutMs} * 1000;
  // One message at a time, mapped for this listing only: 32 KiB.
  auto batch = std::make_unique<SnapshotBlocks>();
  BlockList list(id, max_blocks);
  std::string why_not;
  for (;;) {
    const uint64_t now_us = MonotonicUs();
    if (now_us >= deadline_us ||
        !WaitReadable(fd_, static_cast<int>((deadline_us - now_us) / 1000) + 1)) {
      why_not = "its copy did not list its blocks within " + std::to_string(kListTimeoutMs) + " ms";
      break;
    }
    const ssize_t n = recv(fd_, batch.get(), sizeof(*batch), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      why_not = "its snapshot channel closed as its copy listed its blocks";
      break;
    }
    const BlockList::Status status = list.Add(*batch, static_cast<size_t>(n));
    if (status == BlockList::Status::kDone) {
      snapshot->heap_blocks = std::move(list.blocks());
      snapshot->blocks_listed = true;
      return;
    }
    if (status == BlockList::Status::kFailed) {
      why_not = list.why_not();
      break;
    }
  }
  if (!snapshot->note.empty()) snapshot->note += "; ";
  snapshot->note += why_not + ": unsampled blocks not followed";
}

std::unique_ptr<ProcessSnapshot> SnapshotChannel::Take(int pid, const RegisterLayout& layout,
                                                       const std::function<void()>& while_stopped,
                                                       bool list_blocks, size_t max_blocks,
                                                       std::string* error) {
  if (!ReadHello(kHelloTimeoutMs, error)) return nullptr;
  auto snapshot = std::make_unique<ProcessSnapshot>();
  // The program stalls from here: a malloc waits while the allocator is held.
  const uint64_t start_us = MonotonicUs();
  // The allocator first: a thread stopped while it held an allocator lock would keep the copy
  // from listing, and the holding thread from ever getting it.
  std::string not_listed;
  const bool listing = list_blocks && can_list_blocks_ && HoldAllocator(&not_listed);
  ThreadStopper stopper;
  std::string stop_error;
  snapshot->threads_held = stopper.Stop(pid, thread_tid_, layout, kStopTimeoutUs, &stop_error);
  if (!snapshot->threads_held) {
    snapshot->note = stop_error + ": copied while it ran, its threads' registers not read";
  }
  while_stopped();
  const uint64_t id = next_id_++;
  const bool asked = Ask(listing ? kSnapshotForkAndList : kSnapshotFork, id);
  const bool copied = asked && ReceiveReady(id, kReadyTimeoutMs, snapshot.get(), error);
  if (!asked) *error = "its snapshot channel is closed";
  snapshot->threads = stopper.threads();
  stopper.Resume();
  snapshot->stall_us = MonotonicUs() - start_us;
  if (!copied) return nullptr;
  size_t unstopped = 0;
  for (const ThreadStopper::Thread& thread : snapshot->threads) unstopped += !thread.stopped;
  if (unstopped > 0 && snapshot->note.empty()) {
    snapshot->note = std::to_string(unstopped) + " of its threads did not stop in time: their "
                     "registers not read";
  }
  if (listing) {
    ReceiveBlocks(id, max_blocks, snapshot.get());
  } else if (!not_listed.empty()) {
    if (!snapshot->note.empty()) snapshot->note += "; ";
    snapshot->note += not_listed + ": unsampled blocks not followed";
  }
  return snapshot;
}

}  // namespace droidheap

#include "client/snapshot_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <initializer_list>

#include "common/platform.h"
#include "protocol/fd_passing.h"

namespace droidheap {
namespace {

struct Context {
  uint64_t probe;  // SnapshotReady::probe_value, at probe_address
  int channel;
  uint32_t range_count;
  SnapshotRange ranges[kMaxProfilerRanges];
  const MallocDispatch* allocator;  // lists the heap's blocks; nullptr when it cannot
  // The copy's, as it lists the blocks: its end of the lifeline, the batch being filled, and its
  // maps as they are read.
  int lifeline;
  SnapshotBlocks batch;
  char maps[4096];
};

// Copies not reaped yet: each lives until the daemon lets go of it (its sweep done), and the
// thread answers on meanwhile (the next dump's copy, or the exit's, may be asked for first).
constexpr size_t kMaxLiveCopies = 4;
constexpr int kReapPollMs = 100;

// The running thread's context: what a forked child of the program, which has no such thread,
// lets go of (ForgetSnapshotThreadInChild). Cleared before the thread unmaps it.
std::atomic<Context*> g_context{nullptr};

int ThreadId() { return static_cast<int>(syscall(SYS_gettid)); }

// The mappings of bionic's allocators: jemalloc's (and dlmalloc's) "[anon:libc_malloc]", scudo's
// "[anon:scudo:primary]" and the like. malloc_iterate is asked of them alone: jemalloc's walks
// the range it is given page by page, scudo's walks every block it has, whatever the range.
bool IsHeapMapping(const char* name, size_t length) {
  const auto starts = [&](const char* prefix) {
    const size_t n = strlen(prefix);
    return length >= n && memcmp(name, prefix, n) == 0;
  };
  return starts("[anon:libc_malloc]") || starts("[anon:scudo:");
}

// Waits while the daemon reads; once it lets go of the copy (the lifeline's other end closed, as
// when it gave up on the list or died), the copy ends.
void SendBatch(Context* context, uint32_t flags) {
  context->batch.flags = flags;
  while (!SendWithFds(context->channel, &context->batch, sizeof(context->batch), nullptr, 0,
                      MSG_DONTWAIT)) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
    pollfd wait[2] = {{context->channel, POLLOUT, 0}, {context->lifeline, POLLIN, 0}};
    if (syscall(SYS_ppoll, wait, 2ul, nullptr, nullptr, 0ul) < 0 && errno != EINTR) break;
    if (wait[1].revents != 0) syscall(SYS_exit_group, 0);
  }
  context->batch.count = 0;
}

void ListBlock(uintptr_t base, size_t size, void* arg) {
  auto* context = static_cast<Context*>(arg);
  context->batch.blocks[context->batch.count++] = {base, base + size};
  if (context->batch.count == kBlocksPerMessage) SendBatch(context, 0);
}

struct MapsLine {
  uint64_t start = 0;
  uint64_t end = 0;
  bool private_writable = false;  // "rw-p"
  const char* name = nullptr;
  size_t name_length = 0;
};

// One line of /proc/self/maps: "start-end perms offset dev inode   name".
bool ParseMapsLine(const char* line, size_t length, MapsLine* out) {
  const char* end = line + length;
  const char* p = line;
  for (uint64_t* value : {&out->start, &out->end}) {
    *value = 0;
    for (; p < end && *p != '-' && *p != ' '; ++p) {
      const char c = *p;
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return false;
      *value = *value << 4 | static_cast<uint64_t>(digit);
    }
    ++p;
  }
  out->private_writable = end - p >= 4 && memcmp(p, "rw-p", 4) == 0;
  for (int field = 0; field < 4 && p < end; ++field) {  // perms, offset, dev, inode
    while (p < end && *p != ' ') ++p;
    while (p < end && *p == ' ') ++p;
  }
  out->name = p;
  out->name_length = static_cast<size_t>(end - p);
  return out->end > out->start;
}

// Calls `visit` with each line of the copy's maps (read into the context's buffer: the copy
// allocates nothing) until it returns false. False when the maps cannot be read to their end.
template <typename Visit>
bool ForEachMapping(Context* context, Visit visit) {
  const int fd = static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  size_t kept = 0;        // bytes of a line begun in the last read
  bool skipping = false;  // within a line longer than the buffer (a path no heap has)
  bool going = true;
  ssize_t n = 1;
  while (going && n > 0) {
    n = syscall(SYS_read, fd, context->maps + kept, sizeof(context->maps) - kept);
    if (n < 0 && errno == EINTR) {
      n = 1;
      continue;
    }
    const size_t filled = kept + static_cast<size_t>(n > 0 ? n : 0);
    size_t begin = 0;
    for (size_t i = 0; i < filled && going; ++i) {
      if (context->maps[i] != '\n') continue;
      MapsLine line;
      if (!skipping && ParseMapsLine(context->maps + begin, i - begin, &line)) going = visit(line);
      skipping = false;
      begin = i + 1;
    }
    kept = filled - begin;
    if (kept == sizeof(context->maps)) {
      kept = 0;
      skipping = true;
    }
    memmove(context->maps, context->maps + begin, kept);
  }
  const int read_errno = errno;
  syscall(SYS_close, fd);
  errno = read_errno;
  return n >= 0;
}

// In the copy, where the allocator is held as it was at the fork: every block of its heap
// mappings, sent in batches, the last one marked. A kernel without names for anonymous memory
// (CONFIG_ANON_VMA_NAME, which Android's kernels have) names no heap mapping: then every unnamed
// private writable mapping is asked (slower with scudo, which walks all its blocks each time).
// Not held (its hold lapsed before the fork was asked for), it lists nothing, and says so.
void ListBlocks(Context* context, uint64_t id, bool allocator_held) {
  SnapshotBlocks& batch = context->batch;
  batch.magic = kSnapshotMagic;
  batch.version = kSnapshotVersion;
  batch.size = sizeof(batch);
  batch.count = 0;
  batch.id = id;
  batch.error = ETIME;
  if (!allocator_held) {
    SendBatch(context, kBlocksLast | kBlocksUnsupported);
    return;
  }
  batch.error = 0;
  bool named = false;
  bool read = ForEachMapping(context, [&named](const MapsLine& m) {
    named = IsHeapMapping(m.name, m.name_length);
    return !named;
  });
  bool listed = true;
  read = read && ForEachMapping(context, [&](const MapsLine& m) {
           const bool heap = named ? IsHeapMapping(m.name, m.name_length)
                                   : m.private_writable && m.name_length == 0;
           listed = !heap || context->allocator->malloc_iterate(
                                 static_cast<uintptr_t>(m.start),
                                 static_cast<size_t>(m.end - m.start), ListBlock, context) >= 0;
           return listed;
         });
  if (!read || !listed) batch.error = errno;
  SendBatch(context, kBlocksLast | (!read || !listed ? uint32_t{kBlocksUnsupported} : 0u));
}

// The answer to `request`, saying `status`.
SnapshotReady ReadyFor(const SnapshotRequest& request, SnapshotStatus status) {
  SnapshotReady ready{};
  ready.magic = kSnapshotMagic;
  ready.version = kSnapshotVersion;
  ready.size = sizeof(ready);
  ready.status = status;
  ready.id = request.id;
  return ready;
}

// Everything the forked copy does: nothing that takes a lock (the stopped threads may hold any),
// nothing of the program's (atfork handlers, which a raw clone skips). It sends its own mem and
// maps (a process may always open its own; a non-dumpable one's copy may not be opened by anyone
// else but root), lists the heap's blocks when asked, closes every other descriptor the program
// had (a pipe or socket of the program held open by the copy would keep the program's peers from
// seeing it close), and waits until the daemon lets go of the lifeline.
[[noreturn]] void RunCopy(Context* copy, const SnapshotRequest& request, uint64_t thread_stack,
                          bool allocator_held) {
  const Context& context = *copy;
  SnapshotReady ready = ReadyFor(request, kSnapshotTaken);
  ready.copy_pid = static_cast<int32_t>(syscall(SYS_getpid));
  ready.range_count = context.range_count;
  memcpy(ready.profiler_ranges, context.ranges, sizeof(ready.profiler_ranges));
  ready.thread_stack = thread_stack;
  ready.probe_address = reinterpret_cast<uintptr_t>(&context.probe);
  ready.probe_value = context.probe;
  int lifeline[2] = {-1, -1};
  const auto open_own = [](const char* path) {
    return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
  };
  const int fds[4] = {open_own("/proc/self/mem"), open_own("/proc/self/maps"),
                      open_own("/proc/self/pagemap"),
                      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, lifeline) == 0
                          ? lifeline[1]
                          : -1};
  if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0 || fds[3] < 0) {
    ready.status = kSnapshotForkFailed;
    ready.error = errno;
    SendWithFds(context.channel, &ready, sizeof(ready), nullptr, 0);
  } else {
    SendWithFds(context.channel, &ready, sizeof(ready), fds, 4);
    copy->lifeline = lifeline[0];
    if (request.kind == kSnapshotForkAndList) ListBlocks(copy, request.id, allocator_held);
  }
  // Every descriptor but the lifeline's end goes.
  const int keep = lifeline[0];
  const bool closed = keep >= 0 &&
                      (keep == 0 || syscall(SYS_close_range, 0u, keep - 1u, 0u) == 0) &&
                      syscall(SYS_close_range, keep + 1u, ~0u, 0u) == 0;
  for (int fd = 0; !closed && fd < 4096; ++fd) {  // before Linux 5.9: the numbers usually in use
    if (fd != keep) syscall(SYS_close, fd);
  }
  char byte;
  while (keep >= 0 && (syscall(SYS_read, keep, &byte, 1) != 0 && errno == EINTR)) {
  }
  syscall(SYS_exit_group, 0);
  __builtin_unreachable();
}

// Whether a request arrives on the channel within `timeout_ms` (-1: however long), or it closes.
bool WaitForRequest(int channel, int timeout_ms) {
  pollfd p{channel, POLLIN, 0};
  int n;
  while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return n != 0;
}

// The copies forked and not reaped yet, by pid. Reaped one by one (never waitpid(-1): the
// program's own children are the program's); __WALL: with an exit signal or without.
struct LiveCopies {
  pid_t pids[kMaxLiveCopies];
  size_t count = 0;

  void Reap(bool wait_for_oldest) {
    for (size_t i = 0; i < count;) {
      int status;
      const int options = __WALL | (wait_for_oldest && i == 0 ? 0 : WNOHANG);
      pid_t done;
      while ((done = waitpid(pids[i], &status, options)) < 0 && errno == EINTR) {
      }
      if (done == 0) {
        ++i;
        continue;
      }
      pids[i] = pids[--count];
      wait_for_oldest = false;
    }
  }
};

// Answers `request` without waiting: a thread that holds the allocator must never block on a
// full channel (the program's malloc would wait with it).
bool Answer(int channel, const SnapshotRequest& request, SnapshotStatus status, int error) {
  SnapshotReady answer = ReadyFor(request, status);
  answer.error = error;
  return SendWithFds(channel, &answer, sizeof(answer), nullptr, 0, MSG_DONTWAIT);
}

void* Run(void* arg) {
  Context* const context = static_cast<Context*>(arg);
  const int channel = context->channel;
  prctl(PR_SET_NAME, "droidheap-snap", 0, 0, 0);
  const SnapshotHello hello{kSnapshotMagic, kSnapshotVersion, sizeof(SnapshotHello), ThreadId(),
                            context->allocator != nullptr ? kHelloCanListBlocks : 0u, 0};
  const uint64_t thread_stack = reinterpret_cast<uintptr_t>(&hello);
  // Whether it holds the allocator (malloc_disable), for a fork that lists blocks: never past
  // the fork, kAllocatorHoldMs, a failed answer, or the channel's end.
  bool holding = false;
  const auto let_go = [&] {
    if (holding) context->allocator->malloc_enable();
    holding = false;
  };
  LiveCopies copies;
  if (send(channel, &hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello)) {
    for (;;) {
      copies.Reap(/*wait_for_oldest=*/false);
      const int timeout_ms = holding ? kAllocatorHoldMs : copies.count > 0 ? kReapPollMs : -1;
      if (!WaitForRequest(channel, timeout_ms)) {
        let_go();
        continue;
      }
      SnapshotRequest request{};
      const ssize_t n = recv(channel, &request, sizeof(request), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the session ended, or the daemon died
      if (n < static_cast<ssize_t>(sizeof(request)) || request.magic != kSnapshotMagic) continue;
      if (request.kind == kSnapshotHoldAllocator) {
        if (!holding && context->allocator != nullptr) {
          context->allocator->malloc_disable();
          holding = true;
        }
        if (!Answer(channel, request, holding ? kSnapshotAllocatorHeld : kSnapshotForkFailed,
                    holding ? 0 : ENOTSUP)) {
          let_go();
        }
        continue;
      }
      if (copies.count == kMaxLiveCopies) copies.Reap(/*wait_for_oldest=*/true);
      // A raw clone: a fork() would run the program's atfork handlers, which take locks the
      // stopped threads may hold. No exit signal: a program's own wait() never reaps the copy
      // (qemu-user refuses that, EINVAL: there the program may see a SIGCHLD).
      long pid = syscall(SYS_clone, 0ul, 0ul, 0ul, 0ul, 0ul);
      if (pid < 0 && errno == EINVAL) pid = syscall(SYS_clone, SIGCHLD + 0ul, 0ul, 0ul, 0ul, 0ul);
      if (pid == 0) RunCopy(context, request, thread_stack, holding);
      const int clone_errno = errno;
      let_go();
      if (pid < 0) {
        Answer(channel, request, kSnapshotForkFailed, clone_errno);
      } else {
        copies.pids[copies.count++] = static_cast<pid_t>(pid);
      }
    }
  }
  let_go();
  Context* expected = context;
  g_context.compare_exchange_strong(expected, nullptr);
  close(channel);
  while (copies.count > 0) copies.Reap(/*wait_for_oldest=*/true);
  munmap(arg, sizeof(Context));
  return nullptr;
}

}  // namespace

void ForgetSnapshotThreadInChild() {
  Context* context = g_context.exchange(nullptr);
  if (context == nullptr) return;
  close(context->channel);
  munmap(context, sizeof(Context));
}

bool StartSnapshotThread(int channel, const SnapshotRange* ranges, size_t range_count,
                         const MallocDispatch* allocator) {
  void* page = mmap(nullptr, sizeof(Context), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
  if (page == MAP_FAILED) {
    close(channel);
    return false;
  }
  auto* context = static_cast<Context*>(page);
  context->probe = kSnapshotMagic ^ (reinterpret_cast<uintptr_t>(context) << 16);
  context->channel = channel;
  context->allocator = kAllocatorListsBlocks && allocator != nullptr &&
                               allocator->malloc_iterate != nullptr &&
                               allocator->malloc_disable != nullptr &&
                               allocator->malloc_enable != nullptr
                           ? allocator
                           : nullptr;
  // Its own context is the profiler's too: the copy lists every block's address in it.
  context->range_count = static_cast<uint32_t>(range_count < kMaxProfilerRanges - 1
                                                   ? range_count
                                                   : kMaxProfilerRanges - 1);
  memcpy(context->ranges, ranges, context->range_count * sizeof(SnapshotRange));
  context->ranges[context->range_count++] = {reinterpret_cast<uintptr_t>(context),
                                             reinterpret_cast<uintptr_t>(context + 1)};
  // The thread takes no signal of the program's: it starts with every signal blocked, and so does
  // the copy it forks (only SIGKILL reaches it).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  g_context.store(context);
  const bool started = pthread_create(&thread, &attr, Run, context) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!started) {
    g_context.store(nullptr);
    close(channel);
    munmap(page, sizeof(Context));
  }
  return started;
}

}  // namespace droidheap

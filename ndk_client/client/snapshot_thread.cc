#include "client/snapshot_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/platform.h"
#include "protocol/fd_passing.h"

namespace droidheap {
namespace {

struct Context {
  uint64_t probe;  // SnapshotReady::probe_value, at probe_address
  int channel;
  uint32_t range_count;
  SnapshotRange ranges[kMaxProfilerRanges];
};

int ThreadId() { return static_cast<int>(syscall(SYS_gettid)); }

// Everything the forked copy does: nothing that takes a lock (the stopped threads may hold any),
// nothing of the program's (atfork handlers, which a raw clone skips). It sends its own mem and
// maps (a process may always open its own; a non-dumpable one's copy may not be opened by anyone
// else but root), closes every other descriptor the program had (a pipe or socket of the program
// held open by the copy would keep the program's peers from seeing it close), and waits until
// the daemon lets go of the lifeline.
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

[[noreturn]] void RunCopy(const Context& context, const SnapshotRequest& request,
                          uint64_t thread_stack) {
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

void* Run(void* arg) {
  const Context& context = *static_cast<Context*>(arg);
  prctl(PR_SET_NAME, "droidheap-snap", 0, 0, 0);
  const SnapshotHello hello{kSnapshotMagic, kSnapshotVersion, sizeof(SnapshotHello), ThreadId()};
  const uint64_t thread_stack = reinterpret_cast<uintptr_t>(&hello);
  if (send(context.channel, &hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello)) {
    for (;;) {
      SnapshotRequest request{};
      const ssize_t n = recv(context.channel, &request, sizeof(request), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the session ended, or the daemon died
      if (n < static_cast<ssize_t>(sizeof(request)) || request.magic != kSnapshotMagic) continue;
      // A raw clone: a fork() would run the program's atfork handlers, which take locks the
      // stopped threads may hold. No exit signal: a program's own wait() never reaps the copy
      // (qemu-user refuses that, EINVAL: there the program may see a SIGCHLD).
      long pid = syscall(SYS_clone, 0ul, 0ul, 0ul, 0ul, 0ul);
      if (pid < 0 && errno == EINVAL) pid = syscall(SYS_clone, SIGCHLD + 0ul, 0ul, 0ul, 0ul, 0ul);
      if (pid == 0) RunCopy(context, request, thread_stack);
      if (pid < 0) {
        SnapshotReady failed = ReadyFor(request, kSnapshotForkFailed);
        failed.error = errno;
        SendWithFds(context.channel, &failed, sizeof(failed), nullptr, 0);
        continue;
      }
      int status;  // reaped once the daemon lets it go; __WALL: with an exit signal or without
      while (waitpid(static_cast<pid_t>(pid), &status, __WALL) < 0 && errno == EINTR) {
      }
    }
  }
  close(context.channel);
  munmap(arg, sizeof(Context));
  return nullptr;
}

}  // namespace

bool StartSnapshotThread(int channel, const SnapshotRange* ranges, size_t range_count) {
  void* page = mmap(nullptr, sizeof(Context), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
  if (page == MAP_FAILED) {
    close(channel);
    return false;
  }
  auto* context = static_cast<Context*>(page);
  context->probe = kSnapshotMagic ^ (reinterpret_cast<uintptr_t>(context) << 16);
  context->channel = channel;
  context->range_count = static_cast<uint32_t>(range_count < kMaxProfilerRanges
                                                   ? range_count
                                                   : kMaxProfilerRanges);
  memcpy(context->ranges, ranges, context->range_count * sizeof(SnapshotRange));
  // The thread takes no signal of the program's: it starts with every signal blocked, and so does
  // the copy it forks (only SIGKILL reaches it).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const bool started = pthread_create(&thread, &attr, Run, context) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!started) {
    close(channel);
    munmap(page, sizeof(Context));
  }
  return started;
}

}  // namespace droidheap

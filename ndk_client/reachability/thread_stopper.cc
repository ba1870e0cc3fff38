#include "reachability/thread_stopper.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "common/numbered_entries.h"
#include "common/platform.h"
#include "daemon/clock.h"

namespace droidheap {
namespace {

// Tids this daemon thread seized and could not release yet: not stopped when released (the
// kernel detaches stopped tracees only), or killed while stopped (their exit is ours to reap: an
// unreaped traced thread keeps its process a zombie). Per thread because ptrace binds a tracee
// to the thread that seized it: no other thread could release them, and the kernel releases them
// all when this one exits.
DROIDHEAP_EXECUTABLE_TLS std::vector<int> t_late;

// Waits between polls of threads that have not stopped yet: short first (a running thread stops
// within microseconds of the interrupt), longer while they keep us waiting.
constexpr uint64_t kFirstNapUs = 20;
constexpr uint64_t kLongestNapUs = 1000;
// How long Resume waits for a thread that had not stopped, before leaving it to ReleaseLate.
constexpr uint64_t kResumeGraceUs = 20000;

// NT_PRSTATUS as the kernel lays it out for a tracee of each ABI (a 32-bit tracee's in 32-bit
// words whatever the tracer's ABI): how many words, and which one is the stack pointer.
struct RegsetShape {
  Abi abi;
  uint32_t words;
  uint32_t sp;
};
constexpr RegsetShape kRegsets[] = {
    // user_regs_struct: r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip
    // cs eflags rsp ss fs_base gs_base ds es fs gs
    {Abi::kX86_64, 27, 19},
    // user_pt_regs: x0..x30 sp pc pstate
    {Abi::kArm64, 34, 31},
    // i386 user_regs_struct: ebx ecx edx esi edi ebp eax ds es fs gs orig_eax eip cs eflags esp ss
    {Abi::kX86, 17, 15},
    // pt_regs: r0..r15 (r13 sp) cpsr orig_r0
    {Abi::kArm, 18, 13},
};

void SleepUs(uint64_t us) {
  timespec nap{static_cast<time_t>(us / 1000000u), static_cast<long>(us % 1000000u) * 1000};
  nanosleep(&nap, nullptr);
}

long Ptrace(int request, int tid, uintptr_t data) {
  return ptrace(static_cast<decltype(PTRACE_SEIZE)>(request), tid, nullptr,
                reinterpret_cast<void*>(data));
}

enum class Report { kRunning, kStopped, kGone };

// One look, without waiting, at what our tracee `tid` reports. kStopped: in a ptrace stop, with
// *signal the signal it was about to take (0 for the interrupt's stop or a group-stop, which
// carry no signal to hand back). kGone: it exited (now reaped) or is no tracee of ours. Only
// this tid is waited for: the daemon's own children are none of our business.
//
// WNOWAIT leaves the stop unconsumed: the kernel keeps the signal of a signal-delivery-stop as the
// stop's code until a wait consumes it, and delivers it if the tracer dies before detaching (a
// consumed stop would resume with no signal, and the program would lose it).
Report Poll(int tid, int* signal) {
  siginfo_t info;
  memset(&info, 0, sizeof(info));  // si_pid stays 0 when there is nothing to report
  // A tracee's ptrace stops are reported without WSTOPPED (which would add group-stops of
  // children of ours that are no tracees).
  const int flags = WEXITED | WNOHANG | WNOWAIT | __WALL;
  if (waitid(P_PID, static_cast<id_t>(tid), &info, flags) != 0) {
    return errno == EINTR ? Report::kRunning : Report::kGone;
  }
  if (info.si_pid == 0) return Report::kRunning;
  if (info.si_code == CLD_TRAPPED) {
    // The stop's code: the signal, with the ptrace event above it. Without ptrace options the
    // only event is PTRACE_EVENT_STOP (our interrupt, or a group-stop seen by a seized tracee);
    // no event means a signal-delivery-stop.
    *signal = (info.si_status >> 8) == 0 ? info.si_status & 0x7f : 0;
    return Report::kStopped;
  }
  // Exited or killed: reaped now (an unreaped traced thread would keep its process a zombie).
  int status;
  waitpid(tid, &status, WNOHANG | __WALL);
  return Report::kGone;
}

// The tids in /proc/pid/task; false when the process is gone.
bool ListThreads(int pid, std::vector<int>* tids) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", pid);
  return ListNumberedEntries(path, tids);
}

// Whether thread `tid` has exited: gone from /proc, or a zombie (a thread group leader that
// exited before its other threads stays one). The kernel refuses to seize an exiting thread with
// EPERM, which must not read as "not permitted".
bool HasExited(int pid, int tid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char stat[512];
  const ssize_t n = read(fd, stat, sizeof(stat) - 1);
  close(fd);
  if (n <= 0) return true;
  stat[n] = '\0';
  // "tid (comm) S ...": comm may hold anything, ')' too; the state follows the last ')'.
  const char* paren = strrchr(stat, ')');
  return paren == nullptr || paren[1] == '\0' || paren[2] == 'Z' || paren[2] == 'X';
}

std::string SeizeFailure(int error, int tid) {
  const std::string thread = std::to_string(tid);
  if (error == EPERM || error == EACCES) {
    return std::string("ptrace not permitted (") + strerror(error) + " seizing thread " + thread +
           ": traced already, another user's or a non-dumpable process, Yama or SELinux)";
  }
  if (error == ENOSYS) return "ptrace not available (ENOSYS: qemu-user does not emulate it)";
  return "PTRACE_SEIZE of thread " + thread + " failed: " + strerror(error);
}

// Reads the registers of stopped `thread` as words of `layout`'s ABI. False when it is no longer
// stopped (killed meanwhile); true with no registers when the kernel would not give them.
bool ReadRegisters(const RegisterLayout& layout, ThreadStopper::Thread* thread) {
  uint64_t buffer[128];  // 1 KiB: more than any ABI's NT_PRSTATUS (arm64's 272 bytes)
  iovec io{buffer, sizeof(buffer)};
  if (ptrace(PTRACE_GETREGSET, thread->tid, reinterpret_cast<void*>(NT_PRSTATUS), &io) != 0) {
    return errno != ESRCH;
  }
  const size_t word = layout.word_size == 4 ? 4 : 8;
  const size_t count = io.iov_len / word;
  const auto* bytes = reinterpret_cast<const unsigned char*>(buffer);
  thread->registers.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (word == 4) {
      uint32_t value;
      memcpy(&value, bytes + i * 4, 4);
      thread->registers[i] = value;
    } else {
      memcpy(&thread->registers[i], bytes + i * 8, 8);
    }
  }
  // Only a register set of the ABI's own size says where its stack pointer is: another size means
  // `layout` is not the process's ABI.
  for (const RegsetShape& shape : kRegsets) {
    if (shape.abi == layout.abi && shape.words == count) {
      thread->stack_pointer = thread->registers[shape.sp];
    }
  }
  return true;
}

}  // namespace

bool ThreadStopper::Stop(int pid, int except_tid, const RegisterLayout& layout,
                         uint64_t timeout_us, std::string* error) {
  Resume();
  const uint64_t deadline_us = MonotonicUs() + timeout_us;
  // The thread left running may still be seized by an earlier hold that could not let it go: it
  // is let go as soon as it stops, before anything else.
  for (uint64_t nap_us = kFirstNapUs;
       std::find(t_late.begin(), t_late.end(), except_tid) != t_late.end() && MonotonicUs() < deadline_us;
       nap_us = std::min(nap_us * 2, kLongestNapUs)) {
    SleepUs(nap_us);
    ReleaseLate();
  }
  std::vector<int> seen;  // sorted: every tid met, so that none is seized twice
  std::vector<bool> gone;  // beside threads_: exited while being stopped
  std::vector<size_t> waiting;  // indices in threads_ of threads seized, not stopped yet
  std::vector<int> tids;
  std::string failure;
  // Threads not stopped yet may start others: list again once those seized have stopped, until a
  // listing shows no new thread (or time is up).
  while (failure.empty()) {
    if (!ListThreads(pid, &tids)) {
      failure = "no such process";
      break;
    }
    bool added = false;
    for (const int tid : tids) {
      const auto at = std::lower_bound(seen.begin(), seen.end(), tid);
      if (tid == except_tid || (at != seen.end() && *at == tid)) continue;
      seen.insert(at, tid);
      // A thread an earlier hold could not let go is still seized and interrupted: it joins this
      // hold as it is (seizing it again would fail).
      const auto late = std::find(t_late.begin(), t_late.end(), tid);
      if (late != t_late.end()) {
        t_late.erase(late);
      } else if (Ptrace(PTRACE_SEIZE, tid, 0) != 0) {
        const int seize_error = errno;
        if (seize_error == ESRCH || (seize_error == EPERM && HasExited(pid, tid))) continue;
        failure = SeizeFailure(seize_error, tid);
        break;
      } else {
        // Fails only when the thread is exiting, and then its exit is reaped while waiting.
        Ptrace(PTRACE_INTERRUPT, tid, 0);
      }
      Thread thread;
      thread.tid = tid;
      threads_.push_back(std::move(thread));
      pending_signals_.push_back(0);
      gone.push_back(false);
      waiting.push_back(threads_.size() - 1);
      added = true;
    }
    if (!failure.empty() || !added) break;
    WaitForStops(&waiting, &gone, layout, deadline_us);
    if (MonotonicUs() >= deadline_us) break;
  }
  // The threads that exited meanwhile are dropped.
  size_t kept = 0;
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (gone[i]) continue;
    if (kept != i) {  // (a vector moved onto itself would come out empty)
      threads_[kept] = std::move(threads_[i]);
      pending_signals_[kept] = pending_signals_[i];
    }
    ++kept;
  }
  threads_.resize(kept);
  pending_signals_.resize(kept);
  // Nothing held and no except_tid alive: every thread had exited (a zombie), the process is gone.
  if (failure.empty() && threads_.empty() && (except_tid == 0 || HasExited(pid, except_tid))) {
    failure = "no such process";
  }
  if (!failure.empty()) {
    Resume();
    if (error != nullptr) *error = "cannot stop pid " + std::to_string(pid) + ": " + failure;
    return false;
  }
  return true;
}

void ThreadStopper::WaitForStops(std::vector<size_t>* waiting, std::vector<bool>* gone,
                                 const RegisterLayout& layout, uint64_t deadline_us) {
  uint64_t nap_us = kFirstNapUs;
  for (;;) {
    bool progressed = false;
    size_t left = 0;
    for (const size_t index : *waiting) {
      Thread& thread = threads_[index];
      switch (Poll(thread.tid, &pending_signals_[index])) {
        case Report::kRunning:
          (*waiting)[left++] = index;
          break;
        case Report::kStopped:
          // False when killed meanwhile: not stopped any more; Resume hands it on to be reaped.
          thread.stopped = ReadRegisters(layout, &thread);
          progressed = true;
          break;
        case Report::kGone:
          (*gone)[index] = true;
          progressed = true;
          break;
      }
    }
    waiting->resize(left);
    if (waiting->empty() || MonotonicUs() >= deadline_us) return;
    if (progressed) {
      nap_us = kFirstNapUs;
    } else {
      SleepUs(nap_us);
      nap_us = std::min(nap_us * 2, kLongestNapUs);
    }
  }
}

void ThreadStopper::Resume() {
  bool handed_late = false;
  for (size_t i = 0; i < threads_.size(); ++i) {
    const Thread& thread = threads_[i];
    // The signal it was about to take goes with it: delivered as the thread goes on.
    if (thread.stopped &&
        Ptrace(PTRACE_DETACH, thread.tid, static_cast<uintptr_t>(pending_signals_[i])) == 0) {
      continue;
    }
    t_late.push_back(thread.tid);
    handed_late = true;
  }
  threads_.clear();
  pending_signals_.clear();
  // A thread that had not stopped was interrupted: it stops soon, as a rule.
  const uint64_t give_up_us = MonotonicUs() + kResumeGraceUs;
  uint64_t nap_us = kFirstNapUs;
  while (ReleaseLate() > 0 && handed_late && MonotonicUs() < give_up_us) {
    SleepUs(nap_us);
    nap_us = std::min(nap_us * 2, kLongestNapUs);
  }
}

size_t ThreadStopper::ReleaseLate() {
  std::vector<int>& late = t_late;
  size_t kept = 0;
  for (const int tid : late) {
    int signal = 0;
    switch (Poll(tid, &signal)) {
      case Report::kRunning:
        late[kept++] = tid;
        break;
      case Report::kStopped:
        // Fails only when killed meanwhile: then its exit is still to be reaped.
        if (Ptrace(PTRACE_DETACH, tid, static_cast<uintptr_t>(signal)) != 0) late[kept++] = tid;
        break;
      case Report::kGone:
        break;
    }
  }
  late.resize(kept);
  return kept;
}

}  // namespace droidheap

// Holds every thread of a process still while a snapshot of it is taken, and reads their
// registers: the roots a sweep (heap_sweep.h) takes from the threads.
//
// ptrace's PTRACE_SEIZE + PTRACE_INTERRUPT, never SIGSTOP: the process sees no signal, and if the
// daemon dies while the threads are held the kernel lets them go (a SIGSTOP left behind would stop
// an app for good). A thread that was taking a signal when it stopped gets it on release, and
// also when the daemon dies holding it (stops are observed with WNOWAIT, which leaves the signal
// with the kernel).
//
// A job-control stop stays one: a thread that was about to take SIGSTOP (SIGTSTP...) gets it back
// on release and the process then stops; a thread that was in a group-stop, or joins one while
// held, returns to it when released (the kernel reinstates a group-stop on detach).
//
// Owned by one thread of the daemon (ptrace binds a tracee to the thread that seized it): Stop,
// Resume, ReleaseLate and the destructor must run there.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "unwinder/registers.h"

namespace droidheap {

class ThreadStopper {
 public:
  struct Thread {
    int tid = 0;
    bool stopped = false;  // false: it did not stop within the timeout (its registers are unknown)
    // Its general registers as words of the process's ABI (zero-extended for a 32-bit process).
    std::vector<uint64_t> registers;
    // From `registers`; 0 when not stopped, or when `layout` is not the process's ABI (the kernel
    // gave a register set of another size).
    uint64_t stack_pointer = 0;
  };

  ThreadStopper() = default;
  ThreadStopper(const ThreadStopper&) = delete;
  ThreadStopper& operator=(const ThreadStopper&) = delete;
  ~ThreadStopper() { Resume(); }

  // Stops every thread of process `pid` but `except_tid` (0: none), threads it starts meanwhile
  // included, waiting up to `timeout_us` for them to stop. `layout`: the process's ABI. False,
  // with a one-line reason in *error and nothing held, when the process cannot be traced at all
  // (permissions, no ptrace as under qemu-user, gone); true otherwise, even when some threads did
  // not stop in time (Thread::stopped false; such a thread may also have started threads that
  // are not listed). Releases what an earlier Stop still holds first.
  bool Stop(int pid, int except_tid, const RegisterLayout& layout, uint64_t timeout_us,
            std::string* error);
  const std::vector<Thread>& threads() const { return threads_; }

  // Lets every thread go on. Idempotent. A thread that had not stopped cannot be let go before it
  // does (the kernel detaches stopped tracees only): Resume waits for it briefly, then leaves it
  // to ReleaseLate.
  void Resume();

  // Lets go the threads that earlier Stops on this daemon thread (of any ThreadStopper, destroyed
  // or not) seized but could not release because they had not stopped yet, as far as they have
  // stopped (or exited) since; never waits. Each Stop and Resume calls it; a daemon thread that
  // seldom stops processes should call it now and then (say once a second) while it returns
  // non-zero: a seized thread with a pending interrupt sits stopped from when it gets there until
  // released. Returns how many are still to be released.
  static size_t ReleaseLate();

 private:
  // Waits until the threads at `waiting` (indices in threads_) stop, exit (marked in *gone) or
  // `deadline_us` passes, reading the registers of those that stop; leaves the rest in *waiting.
  void WaitForStops(std::vector<size_t>* waiting, std::vector<bool>* gone,
                    const RegisterLayout& layout, uint64_t deadline_us);

  std::vector<Thread> threads_;
  // Beside threads_: the signal each stopped thread was about to take (0: none), handed back to
  // it on release so that the process loses none.
  std::vector<int> pending_signals_;
};

}  // namespace droidheap

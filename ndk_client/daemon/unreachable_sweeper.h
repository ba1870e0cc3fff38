// The thread that sweeps the snapshots one unwinding worker hands it (unreachable_scan.h): a sweep
// reads the whole copy of a process (about a second per GiB), and a worker that swept would read
// no process's records meanwhile, so a program whose buffer filled would stand still until it
// ended. Jobs are swept one at a time, in the order posted; each outcome is queued for the worker,
// and a byte written to its wake-up pipe.
//
// Post and TakeOutcomes are called by the worker; the rest runs on the sweeper's own thread,
// started at the first job.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/unreachable_scan.h"

namespace droidheap {

class UnreachableSweeper {
 public:
  // `wake_fd`: written a byte when an outcome is ready (the worker's wake-up pipe, which must
  // outlive this).
  explicit UnreachableSweeper(int wake_fd) : wake_fd_(wake_fd) {}
  UnreachableSweeper(const UnreachableSweeper&) = delete;
  UnreachableSweeper& operator=(const UnreachableSweeper&) = delete;
  // Ends after the sweep under way; jobs not begun are dropped (their copies let go).
  ~UnreachableSweeper();

  void Post(SweepJob job);
  std::vector<SweepOutcome> TakeOutcomes();
  // Waits up to `timeout_ms` for an outcome not yet taken; true when there is one.
  bool WaitForOutcome(int timeout_ms);

 private:
  void Run();

  const int wake_fd_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<SweepJob> jobs_;            // guarded by mutex_
  std::vector<SweepOutcome> outcomes_;   // guarded by mutex_
  bool stopping_ = false;                // guarded by mutex_
  std::thread thread_;
};

}  // namespace droidheap

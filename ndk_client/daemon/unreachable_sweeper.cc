#include "daemon/unreachable_sweeper.h"

#include <unistd.h>

#include <chrono>
#include <utility>

namespace droidheap {

UnreachableSweeper::~UnreachableSweeper() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void UnreachableSweeper::Post(SweepJob job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread(&UnreachableSweeper::Run, this);
  }
  changed_.notify_all();
}

std::vector<SweepOutcome> UnreachableSweeper::TakeOutcomes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(outcomes_);
}

bool UnreachableSweeper::WaitForOutcome(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [this] { return !outcomes_.empty(); });
}

void UnreachableSweeper::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    SweepJob job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    SweepOutcome outcome = Sweep(std::move(job));
    lock.lock();
    outcomes_.push_back(std::move(outcome));
    changed_.notify_all();
    char byte = 's';
    (void)!write(wake_fd_, &byte, 1);
  }
}

}  // namespace droidheap

// Poisson byte sampler, one per thread (thread-local, never shared; a zero-initialised one is
// ready). Each byte allocated is a sample point with probability 1/interval; an allocation
// containing n >= 1 sample points is reported as interval * n bytes when smaller than the
// interval, and as its true size otherwise (as heapprofd does), which keeps the byte totals
// unbiased.
#pragma once

#include <math.h>
#include <stdint.h>
#include <unistd.h>

namespace droidheap {

class Sampler {
 public:
  // Inline in every allocation, so it only reads and writes this thread's own state: false, after
  // one subtraction, for an allocation that holds no sample point. True sends the allocation to
  // SampleSize. Answers for the session the thread last sampled for: the hooks call Restart first
  // when the session changed (they learn it from the recording generation they check anyway).
  bool MaybeSampled(uint64_t alloc_size) {
    if (alloc_size >= small_limit_) return true;
    bytes_until_sample_ -= static_cast<int64_t>(alloc_size);
    return bytes_until_sample_ <= 0;
  }

  // The session this thread's stream belongs to (0: none yet).
  uint32_t session() const { return session_; }
  // The bytes to the next sample point, set aside while the profiler allocates on this thread
  // (HookThread::EnterHook): the stream is the program's allocations alone.
  int64_t countdown() const { return bytes_until_sample_; }
  void set_countdown(int64_t countdown) { bytes_until_sample_ = countdown; }
  // Forgets the stream: every allocation goes to SampleSize, which starts the next one.
  void Restart() {
    session_ = 0;
    small_limit_ = 0;
  }

  // An allocation MaybeSampled let through: the bytes it stands for, 0 = not sampled. A session
  // new to this thread starts its stream afresh: seeded from `seed` and the thread id (each
  // thread its own stream, reproducible when the daemon pins the seed), with its interval.
  // Sessions are numbered from 1.
  uint64_t SampleSize(uint64_t alloc_size, uint64_t interval, uint64_t seed, uint32_t session) {
    if (session != session_) {
      Start(interval, seed, session);
      if (!MaybeSampled(alloc_size)) return 0;
    }
    if (interval <= 1 || alloc_size >= interval) return alloc_size;  // 0 for malloc(0): no byte
    uint64_t points = 0;
    while (bytes_until_sample_ <= 0) {
      ++points;
      bytes_until_sample_ += NextInterval(interval);
    }
    return points * interval;
  }

 private:
  void Start(uint64_t interval, uint64_t seed, uint32_t session) {
    session_ = session;
    state_ = (seed ^ (static_cast<uint64_t>(gettid()) << 32)) | 1;  // xorshift needs non-zero
    // Interval 1 samples everything: a limit of 0 sends every allocation to SampleSize.
    small_limit_ = interval > 1 ? interval : 0;
    bytes_until_sample_ = interval > 1 ? NextInterval(interval) : 0;
  }

  uint64_t NextRandom() {  // xorshift64*: no heap, no locks, good enough for sampling
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dull;
  }
  int64_t NextInterval(uint64_t interval) {
    // Exponential with mean `interval`; u in (0, 1].
    double u = (static_cast<double>(NextRandom() >> 11) + 1.0) / 9007199254740992.0;
    double next = -log(u) * static_cast<double>(interval);
    return next < 1.0 ? 1 : static_cast<int64_t>(next);
  }

  // Zero-initialised: session 0 is none, so the first allocation goes to SampleSize.
  uint32_t session_ = 0;
  uint64_t small_limit_ = 0;  // allocations this large are sampled whatever the count says
  int64_t bytes_until_sample_ = 0;
  uint64_t state_ = 0;
};

}  // namespace droidheap

// Poisson byte sampler, one per thread (thread-local, never shared; a zero-initialised one is
// ready). Each byte allocated is a sample point with probability 1/interval; an allocation
// containing n >= 1 sample points is reported as interval * n bytes when smaller than the
// interval, and as its true size otherwise (as heapprofd does), which keeps the byte totals
// unbiased.
#pragma once

#include <stdint.h>
#include <string.h>
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

  // log(u) for a normal u > 0, libm's to a relative 1e-13 (sampler_test), in half its
  // instructions (at every sample): with u = m * 2^e, m in [sqrt(1/2), sqrt(2)), log(m) is
  // 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, whose series is cut after s^15.
  static double Log(double u) {
    uint64_t bits;
    memcpy(&bits, &u, sizeof(bits));
    int64_t exponent = static_cast<int64_t>(bits >> 52) - 1023;
    bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);  // m in [1, 2)
    double m;
    memcpy(&m, &bits, sizeof(m));
    if (m > 1.4142135623730951) {
      m *= 0.5;
      ++exponent;
    }
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double series = 1.0 / 15;  // Horner's, from the last term
    series = series * s2 + 1.0 / 13;
    series = series * s2 + 1.0 / 11;
    series = series * s2 + 1.0 / 9;
    series = series * s2 + 1.0 / 7;
    series = series * s2 + 1.0 / 5;
    series = series * s2 + 1.0 / 3;
    series = series * s2 + 1.0;
    return static_cast<double>(exponent) * 0.6931471805599453 + 2.0 * s * series;
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
    double next = -Log(u) * static_cast<double>(interval);
    return next < 1.0 ? 1 : static_cast<int64_t>(next);
  }

  // Zero-initialised: session 0 is none, so the first allocation goes to SampleSize.
  uint32_t session_ = 0;
  uint64_t small_limit_ = 0;  // allocations this large are sampled whatever the count says
  int64_t bytes_until_sample_ = 0;
  uint64_t state_ = 0;
};

}  // namespace droidheap

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
  // Returns the bytes this allocation stands for: 0 = not sampled. The common case is a decrement
  // and a compare; the thread's first call seeds its stream from `seed` and its thread id (each
  // thread its own stream, reproducible when the daemon pins the seed).
  uint64_t SampleSize(uint64_t alloc_size, uint64_t interval, uint64_t seed) {
    if (interval <= 1 || alloc_size >= interval) return alloc_size;  // 0 for malloc(0): no byte
    bytes_until_sample_ -= static_cast<int64_t>(alloc_size);
    if (bytes_until_sample_ > 0) return 0;
    return SampledPoints(alloc_size, interval, seed) * interval;
  }

 private:
  uint64_t SampledPoints(uint64_t alloc_size, uint64_t interval, uint64_t seed) {
    if (!seeded_) {
      state_ = (seed ^ (static_cast<uint64_t>(gettid()) << 32)) | 1;  // xorshift needs non-zero
      seeded_ = true;
      bytes_until_sample_ = NextInterval(interval) - static_cast<int64_t>(alloc_size);
      if (bytes_until_sample_ > 0) return 0;
    }
    uint64_t points = 0;
    while (bytes_until_sample_ <= 0) {
      ++points;
      bytes_until_sample_ += NextInterval(interval);
    }
    return points;
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

  bool seeded_ = false;
  uint64_t state_ = 0;
  int64_t bytes_until_sample_ = 0;
};

}  // namespace droidheap

// Poisson byte sampler, one per thread (thread-local, never shared). Each byte allocated is a
// sample point with probability 1/interval; an allocation containing n >= 1 sample points is
// reported as interval * n bytes when smaller than the interval, and as its true size otherwise
// (as heapprofd does), which keeps the byte totals unbiased.
#pragma once

#include <math.h>
#include <stdint.h>

namespace droidheap {

class Sampler {
 public:
  // Returns the bytes this allocation stands for: 0 = not sampled.
  // Seed() must have been called first.
  uint64_t SampleSize(uint64_t alloc_size, uint64_t interval) {
    if (alloc_size == 0) return 0;  // malloc(0) holds no byte, so it is never a sample point
    if (interval <= 1 || alloc_size >= interval) return alloc_size;
    bytes_until_sample_ -= static_cast<int64_t>(alloc_size);
    if (bytes_until_sample_ > 0) return 0;
    uint64_t points = 0;
    while (bytes_until_sample_ <= 0) {
      ++points;
      bytes_until_sample_ += NextInterval(interval);
    }
    return points * interval;
  }

  bool seeded() const { return seeded_; }
  void Seed(uint64_t seed, uint64_t interval) {
    state_ = seed ? seed : 0x9e3779b97f4a7c15ull;
    seeded_ = true;
    bytes_until_sample_ = NextInterval(interval);
  }

 private:
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

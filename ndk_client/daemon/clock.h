// Clocks the daemon stamps dumps with. BOOTTIME is what Perfetto traces use by default.
#pragma once

#include <stdint.h>
#include <time.h>

namespace droidheap {

inline uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}
inline uint64_t BoottimeNs() { return ClockNs(CLOCK_BOOTTIME); }
inline uint64_t MonotonicUs() { return ClockNs(CLOCK_MONOTONIC) / 1000u; }

}  // namespace droidheap

// The clocks the daemon reads. Which timestamp of the trace is taken on which clock, and why, is
// said in trace_writer.h.
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
// Dump and connection times, as heapprofd stamps ProcessHeapSamples (trace_writer.h).
inline uint64_t MonotonicCoarseNs() { return ClockNs(CLOCK_MONOTONIC_COARSE); }
inline uint64_t MonotonicUs() { return ClockNs(CLOCK_MONOTONIC) / 1000u; }
// What the calling thread ran: a client's drain budget, which the machine's other load must not
// spend.
inline uint64_t ThreadCpuUs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID) / 1000u; }

}  // namespace droidheap

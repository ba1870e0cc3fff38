// How long an unwinding worker may spend reading one client before it cuts the client off.
#pragma once

#include <stdint.h>

namespace droidheap {

// What reading one client has taken so far: the worker thread's CPU time, which the machine's
// other load does not spend, and the wall clock. A budget ends at the CPU time it names or at
// twice that on the wall clock, whichever comes first: a busy machine may take half the worker's
// time before an honest client risks its profile, and a hog on a machine busier still holds the
// others' dumps back no longer.
struct DrainTime {
  uint64_t cpu_us = 0;
  uint64_t wall_us = 0;
  bool Within(uint64_t budget_us) const { return cpu_us < budget_us && wall_us < 2 * budget_us; }
};

// How much of the worker's time each client may take: the dump and last-drain budgets count as
// DrainTime does; the rounds and the dump's deadline are on the wall clock. A buffer of honest
// records takes a fraction of a dump's budget (their unwinds are mostly found in the
// UnwoundStackCache, and the rest cost tens of microseconds), and the host waits far longer for
// the session's last dump. Tests and fuzzers shorten them.
struct DrainBudgets {
  // A round's share per client: ten milliseconds are hundreds of unwinds, most rounds' whole work.
  uint64_t round_us = 10 * 1000;
  uint64_t dump_us = 2 * 1000 * 1000;             // reading one client up to a dump's mark
  uint64_t dump_deadline_us = 20 * 1000 * 1000;   // the whole dump, however many clients
  uint64_t last_drain_us = 2 * 1000 * 1000;       // a closed client's last records
};

}  // namespace droidheap

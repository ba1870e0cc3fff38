// droidheapd's settings, from its command line (main.cc). Read-only after start; shared by value.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <string>
#include <vector>

#include "protocol/ring_buffer.h"
#include "protocol/wire_protocol.h"

namespace droidheap {

struct DaemonConfig {
  std::string socket_path;
  std::string output_path;
  std::vector<int> pids;            // processes to signal and accept
  // Programs started for the session (--spawned), held until droidheapd listens: accepted with
  // their descendants, never signalled (they load the client at their start). Their name is not
  // a target: another process of that name, one of the host's own shells among them, is refused.
  std::vector<int> spawned_pids;
  std::vector<std::string> names;   // program names to accept (and signal when running)
  bool all = false;                 // accept every process that connects
  uint64_t sampling_interval = 4096;
  uint32_t max_stack_bytes = 64 * 1024;
  uint64_t shmem_size = 8 * 1024 * 1024;  // ring buffer data area, a power of two
  uint32_t dump_interval_ms = 0;          // 0 = no periodic dumps
  bool dump_at_max = false;  // dumps hold what was in use at each process's peak, not now
  bool block_client = true;
  // Clients count every allocation and free (protocol/heap_totals.h): two malloc_usable_size
  // calls per malloc+free pair.
  bool exact_totals = true;
  // A forked child goes on as a process of its own (heapprofd's disable_fork_teardown), not
  // only out of its parent's profile.
  bool profile_forked_children = false;
  // The heaps recorded (heap_profile's --heaps): none named = libc's alone; all_heaps = every
  // heap, libc's and the custom ones (--all-heaps).
  std::vector<std::string> heaps;
  bool all_heaps = false;
  uint32_t block_timeout_us = 5000000;  // how long an allocation waits for room with nothing read
  // Every dump also finds the live sampled blocks the process can no longer reach
  // (daemon/unreachable_scan.h); the clients of protocol 11 fork the copies it sweeps.
  bool find_unreachable = false;
  // Guardrails, 0 = none: what the session's bookkeeping (interned stacks, live allocations) may
  // take, and the trace's size.
  uint64_t max_memory_bytes = 0;
  uint64_t max_trace_bytes = 0;
  uint64_t random_seed = 0;  // 0 = from the clock
  int workers = 1;
  bool exit_when_clients_gone = false;  // stop once every connected client has gone
  // Stop (with a final dump) when standard input reaches end-of-file: started over `adb shell`,
  // the daemon's stdin closes when the host's connection goes, whatever killed the host.
  bool stop_when_stdin_closes = false;
  // Debugging and benchmarks: every booked stack, one line each (sample_booker.cc). From the
  // environment variable DROIDHEAP_STACK_LOG.
  std::string stack_log_path;

  // The largest record a client writes: a sample with a whole stack copy, an older client's
  // registers (they take the most room) and a custom heap's tag. Half a ring must hold it
  // (ring_buffer.h).
  uint64_t LargestRecordBytes() const {
    return max_stack_bytes + sizeof(AllocRecord) + kAllocRecordV6RegisterBytes + sizeof(HeapTag) +
           sizeof(RecordHeader);
  }

  bool RecordsMalloc() const { return all_heaps || heaps.empty() || Names(kMallocHeapName); }
  bool RecordsCustomHeap(const std::string& name) const { return all_heaps || Names(name); }

 private:
  bool Names(const std::string& heap) const {
    return std::find(heaps.begin(), heaps.end(), heap) != heaps.end();
  }
};

}  // namespace droidheap

// What the kernel says a profiled process holds (/proc/<pid>/status), read at each dump so that a
// profile shows the sampled heap beside the process's resident and swapped memory.
#pragma once

#include <stdint.h>

namespace droidheap {

struct ProcessMemory {
  bool known = false;  // false: the process is gone, or its status cannot be read
  uint64_t rss_kb = 0;
  uint64_t rss_anon_kb = 0;
  uint64_t rss_file_kb = 0;
  uint64_t rss_shmem_kb = 0;
  uint64_t swap_kb = 0;
  uint64_t peak_rss_kb = 0;  // VmHWM
};

// Reads `pid`'s figures; `known` stays false when they cannot be read.
ProcessMemory ReadProcessMemory(int pid);

}  // namespace droidheap

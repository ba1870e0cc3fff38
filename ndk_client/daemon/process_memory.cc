#include "daemon/process_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/small_file.h"

namespace droidheap {
namespace {

// The value of the "Name:   N kB" line, if `line` is that line.
bool ParseKb(const char* line, const char* name, uint64_t* out) {
  size_t length = strlen(name);
  if (strncmp(line, name, length) != 0) return false;
  *out = strtoull(line + length, nullptr, 10);
  return true;
}

}  // namespace

ProcessMemory ReadProcessMemory(int pid) {
  ProcessMemory memory;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/status", pid);
  char text[8192];
  if (ReadSmallFile(path, text, sizeof(text)) <= 0) return memory;
  for (char* line = text; line != nullptr && *line != '\0';) {
    char* end = strchr(line, '\n');
    if (end != nullptr) *end = '\0';
    // A zombie's status has no Vm lines: `known` comes from VmRSS alone.
    memory.known |= ParseKb(line, "VmRSS:", &memory.rss_kb);
    ParseKb(line, "RssAnon:", &memory.rss_anon_kb) ||
        ParseKb(line, "RssFile:", &memory.rss_file_kb) ||
        ParseKb(line, "RssShmem:", &memory.rss_shmem_kb) ||
        ParseKb(line, "VmSwap:", &memory.swap_kb) || ParseKb(line, "VmHWM:", &memory.peak_rss_kb);
    line = end != nullptr ? end + 1 : nullptr;
  }
  return memory;
}

}  // namespace droidheap

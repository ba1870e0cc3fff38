#include "daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

namespace droidheap {

void Log(const char* fmt, ...) {
  // One write per line, at most PIPE_BUF bytes: the main thread's and the workers' lines never
  // interleave. A longer line (a process's command line can be) is cut.
  static const char kPrefix[] = "droidheapd: ";
  char line[4096];
  memcpy(line, kPrefix, sizeof(kPrefix) - 1);
  const size_t room = sizeof(line) - sizeof(kPrefix);  // keeps a byte for the newline
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(line + sizeof(kPrefix) - 1, room + 1, fmt, args);
  va_end(args);
  if (n < 0) return;
  size_t length = sizeof(kPrefix) - 1 + (static_cast<size_t>(n) < room ? n : room);
  line[length++] = '\n';
  (void)!write(STDERR_FILENO, line, length);
}

}  // namespace droidheap

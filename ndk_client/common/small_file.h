// Reading a small file whole (a /proc entry, the emulated property store) into a caller's buffer:
// no allocation, so the code in the profiled process, where malloc may be our own hook, uses it as
// the daemon does.
#pragma once

#include <fcntl.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

namespace droidheap {

// Reads up to size - 1 bytes of `path` into `buf` and ends them with a NUL. Returns how many bytes
// were read, or -1 when the file cannot be opened.
inline ssize_t ReadSmallFile(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t length = 0;
  while (length + 1 < size) {
    ssize_t n = read(fd, buf + length, size - 1 - length);
    if (n <= 0) break;
    length += static_cast<size_t>(n);
  }
  close(fd);
  buf[length] = '\0';
  return static_cast<ssize_t>(length);
}

}  // namespace droidheap

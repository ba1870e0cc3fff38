#include "unwinder/proc_files.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

namespace droidheap {
namespace {

bool IsProcFileOf(int fd, int pid, const char* name) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
  struct stat expected, got;
  return stat(path, &expected) == 0 && fstat(fd, &got) == 0 && expected.st_dev == got.st_dev &&
         expected.st_ino == got.st_ino;
}

// A memfd, as qemu-user's copy of a guest's maps is.
bool IsMemfd(int fd) {
  char link[64], target[16] = {};
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  return n > 0 && strncmp(target, "/memfd:", 7) == 0;
}

}  // namespace

bool MapsAreEmulated() {
  static const bool emulated = [] {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool copy = !IsProcFileOf(fd, getpid(), "maps") && IsMemfd(fd);
    close(fd);
    return copy;
  }();
  return emulated;
}

bool MapsAreProcessOwn(int maps_fd, int pid) {
  return IsProcFileOf(maps_fd, pid, "maps") || (MapsAreEmulated() && IsMemfd(maps_fd));
}

bool MemIsProcessOwn(int mem_fd, int pid) { return IsProcFileOf(mem_fd, pid, "mem"); }

bool PagemapIsProcessOwn(int pagemap_fd, int pid) {
  return IsProcFileOf(pagemap_fd, pid, "pagemap");
}

}  // namespace droidheap

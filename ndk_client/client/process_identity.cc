#include "client/process_identity.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

namespace droidheap {
namespace {

// Whether /proc/self/smaps lists the flag "wf" for the mapping that starts at `start`. Reads with
// a fixed buffer: the caller's allocator may be the one being hooked.
bool KernelWipesOnFork(uintptr_t start) {
  int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char chunk[4096];
  char line[256];  // longer lines are cut: only their beginnings matter here
  size_t length = 0;
  bool in_mapping = false;
  bool found = false;
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && !found; ++i) {
      if (chunk[i] != '\n') {
        if (length + 1 < sizeof(line)) line[length++] = chunk[i];
        continue;
      }
      line[length] = '\0';
      length = 0;
      char* end = nullptr;
      unsigned long long address = strtoull(line, &end, 16);
      if (end != line && *end == '-') {
        in_mapping = address == start;  // a mapping's first line: "start-end perms ..."
      } else if (in_mapping && strncmp(line, "VmFlags:", 8) == 0) {
        found = strstr(line, " wf") != nullptr;  // flags are two letters, space-separated
        in_mapping = false;
      }
    }
    if (found) break;
  }
  close(fd);
  return found;
}

}  // namespace

void* MapPageWipedOnFork() {
  // What the kernel does with the advice, asked once a process (its children inherit the answer):
  // /proc/self/smaps lists every mapping, thousands in an app, and its reading took 1.3M
  // instructions in sqlite3. -1: not asked yet.
  static std::atomic<int> kernel_wipes{-1};
  if (kernel_wipes.load(std::memory_order_relaxed) == 0) return nullptr;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mapping = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  const bool advised = madvise(mapping, page, MADV_WIPEONFORK) == 0;
  if (advised && kernel_wipes.load(std::memory_order_relaxed) < 0) {
    kernel_wipes.store(KernelWipesOnFork(reinterpret_cast<uintptr_t>(mapping)) ? 1 : 0,
                       std::memory_order_relaxed);
  }
  if (!advised || kernel_wipes.load(std::memory_order_relaxed) == 0) {
    munmap(mapping, page);
    return nullptr;
  }
  return mapping;
}

void ProcessIdentity::Init() {
  pid_ = getpid();
  auto* mark = static_cast<volatile uint64_t*>(MapPageWipedOnFork());
  if (mark == nullptr) return;
  *mark = 1;
  mark_ = mark;  // never unmapped: like the Client, it outlives every hook call
}

}  // namespace droidheap

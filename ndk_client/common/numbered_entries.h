// Listing a /proc directory's numbered entries: the processes in /proc, the threads in
// /proc/PID/task. No allocation but the vector's, which the caller owns.
#pragma once

#include <dirent.h>
#include <stdlib.h>

#include <vector>

namespace droidheap {

// The positive numbers among `dir`'s entries, replacing *numbers; false when `dir` cannot be
// opened (a process gone).
inline bool ListNumberedEntries(const char* dir, std::vector<int>* numbers) {
  DIR* d = opendir(dir);
  if (d == nullptr) return false;
  numbers->clear();
  while (const dirent* entry = readdir(d)) {
    char* end = nullptr;
    const long n = strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0' && n > 0) numbers->push_back(static_cast<int>(n));
  }
  closedir(d);
  return true;
}

}  // namespace droidheap

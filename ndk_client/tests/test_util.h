// Minimal checks for the native tests: print where a check failed and exit non-zero.
#pragma once

#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "unwinder/mapped_file.h"

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

// The whole of the file at `path` into `bytes`; false when it cannot be opened (a thread's /proc
// files once the thread is gone).
inline bool ReadFileIfThere(const std::string& path, std::string* bytes) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) bytes->append(buf, n);
  fclose(f);
  return true;
}

// The whole of the file at `path` (which must be readable).
inline std::string ReadWholeFile(const std::string& path) {
  std::string bytes;
  CHECK(ReadFileIfThere(path, &bytes));
  return bytes;
}

// This program's file, as /proc/self/exe names it.
inline std::string ProgramPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  CHECK(n > 0);
  return std::string(path, static_cast<size_t>(n));
}

// The identity a maps line would give the file at `path` (which must exist).
inline droidheap::MappedFileId FileIdOf(const std::string& path) {
  struct stat st;
  CHECK(stat(path.c_str(), &st) == 0);
  return {major(st.st_dev), minor(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// The load bias of the object whose loadable segment holds `address`: this binary's, for one of its
// functions. Not simply the first object listed: glibc lists the executable first, bionic its
// linker.
inline uint64_t LoadBiasOf(uintptr_t address) {
  struct Search {
    uintptr_t address;
    uint64_t bias;
  } search{address, 0};
  dl_iterate_phdr([](dl_phdr_info* info, size_t, void* out) {
    auto* s = static_cast<Search*>(out);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const auto& ph = info->dlpi_phdr[i];
      const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
      if (ph.p_type == PT_LOAD && s->address >= start && s->address - start < ph.p_memsz) {
        s->bias = info->dlpi_addr;
        return 1;
      }
    }
    return 0;
  }, &search);
  return search.bias;
}

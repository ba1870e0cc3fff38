/* A program that turns a file it has mapped into a trap for the profiler (tests/e2e/
 * test_hostile_files.py): it maps a copy of its own code, DIR/libcopy.so, and renames over it what
 * MODE says: "fifo" (opening it blocks until a writer comes, which never does), "symlink" (to libc)
 * or "other" (a regular copy of libc: another file). Its maps then name the mapping
 * "DIR/libcopy.so (deleted)", as the kernel shows a file whose name is gone, and it puts the same
 * trap at that path too: whenever the daemon read the maps, the path it has leads to a trap. Then it
 * allocates through the mapped copy, so that the daemon unwinds through that mapping and looks for
 * its file.
 * MODE "dirlink" traps a directory of the path instead: the copy is DIR/lib/libcopy.so, and once it
 * is mapped, the file and DIR/lib are removed and DIR/lib becomes a symbolic link to DIR/fifos,
 * where the caller has made FIFOs named "libcopy.so" and "libcopy.so (deleted)", each with a writer
 * blocked in open() that opening the FIFO would wake (the caller checks it sleeps on).
 *   replaced_library MODE DIR
 * Prints "replaced" once the traps are set and "done" at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "copy_file.h"

#define NOINLINE __attribute__((noinline))
enum { BEFORE = 100, BEFORE_SIZE = 128, THROUGH = 1000, THROUGH_SIZE = 4096 };
static void* volatile g_sink;

NOINLINE void site_before_replacing(void) {
  for (int i = 0; i < BEFORE; i++) g_sink = malloc(BEFORE_SIZE);
}

/* Runs from the copy: no relocation and no global, only its arguments, so that it runs anywhere.
 * The store after the call keeps it a real frame rather than a tail call. */
NOINLINE void through_copy(void* (*allocate)(size_t), size_t size, void* volatile* out) {
  *out = allocate(size);
}

struct mapping {
  uintptr_t start, end;
  unsigned long long offset;
  char path[512];
};

/* The mapping of /proc/self/maps holding `address`, or (address 0) the first whose path contains
 * `name`. */
static int find_mapping(uintptr_t address, const char* name, struct mapping* out) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[1024];
  int found = 0;
  while (!found && maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
    struct mapping m = {0};
    if (sscanf(line, "%lx-%lx %*s %llx %*s %*s %511s", &m.start, &m.end, &m.offset, m.path) != 4) {
      continue;
    }
    found = address != 0 ? m.start <= address && address < m.end : strstr(m.path, name) != NULL;
    if (found) *out = m;
  }
  if (maps != NULL) fclose(maps);
  return found;
}

static int set_trap(const char* mode, const char* libc, const char* path) {
  if (strcmp(mode, "fifo") == 0) return mkfifo(path, 0644) == 0;
  if (strcmp(mode, "symlink") == 0) return symlink(libc, path) == 0;
  return copy_file(libc, path);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: replaced_library fifo|symlink|other|dirlink DIR\n");
    return 2;
  }
  const char* mode = argv[1];
  const int dirlink = strcmp(mode, "dirlink") == 0;
  site_before_replacing();

  struct mapping code, libc;
  char copy[1024], deleted[1100], trap[1100], lib_dir[1024];
  snprintf(lib_dir, sizeof(lib_dir), "%s/lib", argv[2]);
  snprintf(copy, sizeof(copy), dirlink ? "%s/lib/libcopy.so" : "%s/libcopy.so", argv[2]);
  snprintf(deleted, sizeof(deleted), "%s (deleted)", copy);
  snprintf(trap, sizeof(trap), "%s/trap", argv[2]);
  if ((dirlink && mkdir(lib_dir, 0755) != 0) ||
      !find_mapping((uintptr_t)through_copy, NULL, &code) ||
      !find_mapping(0, "/libc.so", &libc) || !copy_file(code.path, copy)) {
    fprintf(stderr, "cannot find or copy this program's code or libc\n");
    return 2;
  }
  int fd = open(copy, O_RDONLY);
  char* base = fd < 0 ? MAP_FAILED : mmap(NULL, code.end - code.start, PROT_READ | PROT_EXEC,
                                         MAP_PRIVATE, fd, (off_t)code.offset);
  if (base == MAP_FAILED) {
    perror("mapping the copy");
    return 2;
  }
  close(fd);
  /* dirlink: the maps name the mapping "DIR/lib/libcopy.so (deleted)" once the file is gone (its
   * removed directory keeps its name there), and either path now leads through the link. */
  if (dirlink ? unlink(copy) != 0 || rmdir(lib_dir) != 0 || symlink("fifos", lib_dir) != 0
              : !set_trap(mode, libc.path, deleted) || !set_trap(mode, libc.path, trap) ||
                    rename(trap, copy) != 0) {
    perror("setting the traps");
    return 2;
  }
  printf("replaced\n");
  fflush(stdout);

  void (*copied)(void* (*)(size_t), size_t, void* volatile*) =
      (void (*)(void* (*)(size_t), size_t, void* volatile*))(base + ((uintptr_t)through_copy -
                                                                    code.start));
  for (int i = 0; i < THROUGH; i++) copied(malloc, THROUGH_SIZE, &g_sink);
  printf("done\n");
  return 0;
}

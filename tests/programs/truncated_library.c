/* A program that truncates a file it has mapped under the profiler (tests/e2e/
 * test_hostile_files.py): it maps a copy of its own code, DIR/libcopy.so, allocates through it
 * (the daemon reads the copy's unwind tables), waits for the daemon to have unwound those samples,
 * cuts the copy short after the page of code it runs (its unwind tables lie further on), and then
 * allocates through the copy again from another function: a pc whose unwind rows the daemon has
 * not looked up yet. A daemon that read the tables through a mapping of the file would die of
 * SIGBUS there.
 *   truncated_library DIR
 * Prints "truncated" once the copy is cut and "done" at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "copy_file.h"

#define NOINLINE __attribute__((noinline))
enum { BEFORE = 1000, AFTER = 1000, SIZE = 4096 };
static void* volatile g_sink;

/* Each runs from the copy: no relocation and no global, only their arguments. The store after
 * the call keeps it a real frame rather than a tail call. */
NOINLINE void before_truncating(void* (*allocate)(size_t), size_t size, void* volatile* out) {
  *out = allocate(size);
}
NOINLINE void after_truncating(void* (*allocate)(size_t), size_t size, void* volatile* out) {
  *out = allocate(size + 0);
  *out = (char*)*out + 0;
}

/* Keeps the unwind tables two pages and more past the two functions (compilers emit functions in
 * the order of the source; the tables follow the code), whatever the ABI's layout. */
NOINLINE void padding(void) { __asm__ volatile(".skip 8192"); }

typedef void (*through_fn)(void* (*)(size_t), size_t, void* volatile*);

/* The mapping of /proc/self/maps holding `address`. */
static int find_mapping(uintptr_t address, uintptr_t* start, unsigned long long* offset,
                        char* path, size_t path_size) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[1024], name[512];
  int found = 0;
  while (!found && maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
    uintptr_t from, to;
    unsigned long long at;
    if (sscanf(line, "%lx-%lx %*s %llx %*s %*s %511s", &from, &to, &at, name) != 4) continue;
    if (from <= address && address < to) {
      *start = from;
      *offset = at;
      snprintf(path, path_size, "%s", name);
      found = 1;
    }
  }
  if (maps != NULL) fclose(maps);
  return found;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: truncated_library DIR\n");
    return 2;
  }
  const long page = sysconf(_SC_PAGESIZE);
  uintptr_t start;
  unsigned long long offset;
  char self[512], copy[1024];
  snprintf(copy, sizeof(copy), "%s/libcopy.so", argv[1]);
  if (!find_mapping((uintptr_t)before_truncating, &start, &offset, self, sizeof(self)) ||
      !copy_file(self, copy)) {
    fprintf(stderr, "cannot find or copy this program's code\n");
    return 2;
  }
  /* Up to the end of the page holding both functions, from the start of their mapping. */
  uintptr_t last = (uintptr_t)before_truncating > (uintptr_t)after_truncating
                       ? (uintptr_t)before_truncating : (uintptr_t)after_truncating;
  size_t length = ((last + 64 - start) / page + 1) * page;
  int fd = open(copy, O_RDWR);
  char* base = fd < 0 ? MAP_FAILED
                      : mmap(NULL, length, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, (off_t)offset);
  if (base == MAP_FAILED) {
    perror("mapping the copy");
    return 2;
  }
  through_fn before = (through_fn)(base + ((uintptr_t)before_truncating - start));
  through_fn after = (through_fn)(base + ((uintptr_t)after_truncating - start));
  for (int i = 0; i < BEFORE; i++) before(malloc, SIZE, &g_sink);
  sleep(2); /* the daemon unwinds those samples, reading the copy's tables */
  if (ftruncate(fd, (off_t)(offset + length)) != 0) {
    perror("truncating the copy");
    return 2;
  }
  close(fd);
  printf("truncated\n");
  fflush(stdout);
  for (int i = 0; i < AFTER; i++) after(malloc, SIZE, &g_sink);
  printf("done\n");
  return 0;
}

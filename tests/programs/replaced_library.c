/* A program that turns a file it has mapped into a trap for the profiler (tests/e2e/
 * test_hostile_files.py): it maps a copy of its own code, DIR/libcopy.so, and renames over it what
 * MODE says: "fifo" (opening it blocks until a writer comes, which never does), "symlink" (to libc)
 * or "other" (a regular copy of libc: another file). Its maps then name the mapping
 * "DIR/libcopy.so (deleted)", as the kernel shows a file whose name is gone, and it puts the same
 * trap at that path too: whenever the daemon read the maps, the path it has leads to a trap. Then it
 * allocates through the mapped copy, so that the daemon unwinds through that mapping and looks for
 * its file.
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

static int copy_file(const char* from, const char* to) {
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0755);
  char buf[65536];
  ssize_t n = 0;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0) {
    if (write(out, buf, (size_t)n) != n) n = -1;
  }
  int ok = in >= 0 && out >= 0 && n == 0;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return ok;
}

static int set_trap(const char* mode, const char* libc, const char* path) {
  if (strcmp(mode, "fifo") == 0) return mkfifo(path, 0644) == 0;
  if (strcmp(mode, "symlink") == 0) return symlink(libc, path) == 0;
  return copy_file(libc, path);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: replaced_library fifo|symlink|other DIR\n");
    return 2;
  }
  const char* mode = argv[1];
  site_before_replacing();

  struct mapping code, libc;
  char copy[1024], deleted[1100], trap[1100];
  snprintf(copy, sizeof(copy), "%s/libcopy.so", argv[2]);
  snprintf(deleted, sizeof(deleted), "%s (deleted)", copy);
  snprintf(trap, sizeof(trap), "%s/trap", argv[2]);
  if (!find_mapping((uintptr_t)through_copy, NULL, &code) ||
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
  if (!set_trap(mode, libc.path, deleted) || !set_trap(mode, libc.path, trap) ||
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

/* Runs a program with its /proc/self/mem unreadable, as a sandbox or a security policy may leave
 * it (tests/e2e/test_faults.py): in a mount namespace of its own, /dev/null is bound over
 * /proc/<pid>/mem, then the program is exec'd, keeping the pid. Needs root.
 *   mem_hidden PROGRAM ARGS... */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: mem_hidden PROGRAM ARGS...\n");
    return 2;
  }
  char mem[64];
  snprintf(mem, sizeof(mem), "/proc/%d/mem", (int)getpid());
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("/dev/null", mem, NULL, MS_BIND, NULL) != 0) {
    perror("mem_hidden");
    return 2;
  }
  execv(argv[1], argv + 1);
  perror("mem_hidden: execv");
  return 127;
}

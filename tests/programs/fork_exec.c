/* A process that starts others, for the fork tests (tests/e2e/test_forks.py):
 *   fork_exec fork [PROGRAM ARGS...]   fork; the child frees what the parent allocated before,
 *                                      allocates, then execs PROGRAM or exits
 *   fork_exec vfork PROGRAM ARGS...    vfork; the child execs PROGRAM at once
 * The parent allocates before and after, and prints what its child exited with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
enum { BLOCKS = 100 };
static void* volatile g_sink;
static void* volatile g_before[BLOCKS];

NOINLINE void parent_before_fork(void) {
  for (int i = 0; i < BLOCKS; i++) g_before[i] = malloc(1000);
}
NOINLINE void child_frees_parents_blocks(void) {
  for (int i = 0; i < BLOCKS; i++) free(g_before[i]);
}
NOINLINE void child_allocation(void) { for (int i = 0; i < BLOCKS; i++) g_sink = malloc(3000); }
NOINLINE void parent_after_fork(void) { for (int i = 0; i < BLOCKS; i++) g_sink = malloc(5000); }

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "vfork") == 0 && argc < 3)) {
    fprintf(stderr, "usage: fork_exec fork|vfork [PROGRAM ARGS...]\n");
    return 2;
  }
  parent_before_fork();
  pid_t child;
  if (strcmp(argv[1], "vfork") == 0) {
    child = vfork();
    if (child == 0) {
      execv(argv[2], argv + 2);
      _exit(127);
    }
  } else {
    child = fork();
    if (child == 0) {
      printf("child pid=%d\n", getpid());
      fflush(stdout);
      child_frees_parents_blocks();
      child_allocation();
      if (argc > 2) execv(argv[2], argv + 2);
      _exit(argc > 2 ? 127 : 0);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  parent_after_fork();
  printf("parent pid=%d child exited %d\n", getpid(), WEXITSTATUS(status));
  return 0;
}

/* Allocates in the parent, forks a child that allocates and exits, then allocates again: the
 * child is not part of the session (the client disables itself in a forked child). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
static void* volatile g_sink;

NOINLINE void parent_before_fork(void) { for (int i = 0; i < 100; i++) g_sink = malloc(1000); }
NOINLINE void child_allocation(void) { for (int i = 0; i < 100; i++) g_sink = malloc(3000); }
NOINLINE void parent_after_fork(void) { for (int i = 0; i < 100; i++) g_sink = malloc(5000); }

int main(void) {
  parent_before_fork();
  pid_t child = fork();
  if (child == 0) {
    child_allocation();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  parent_after_fork();
  printf("child status %d\n", WEXITSTATUS(status));
  return 0;
}

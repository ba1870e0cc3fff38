/* Allocates in the parent, forks a child that allocates and exits, then allocates again: the
 * child is not part of the session (the client disables itself in a forked child). A second child
 * comes from a raw clone() system call, which runs no atfork handler: the client must still see
 * that it is not in the profiled process. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
static void* volatile g_sink;

NOINLINE void parent_before_fork(void) { for (int i = 0; i < 100; i++) g_sink = malloc(1000); }
NOINLINE void child_allocation(void) { for (int i = 0; i < 100; i++) g_sink = malloc(3000); }
NOINLINE void raw_clone_child_allocation(void) {
  for (int i = 0; i < 100; i++) g_sink = malloc(7000);
}
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
  /* Like fork(), without libc knowing: flags SIGCHLD only, the child on a copy of our stack. */
  long raw = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (raw == 0) {
    raw_clone_child_allocation();
    syscall(SYS_exit_group, 0);
  }
  int raw_status = 0;
  if (raw > 0) waitpid((pid_t)raw, &raw_status, 0);
  parent_after_fork();
  printf("child status %d raw clone %s status %d\n", WEXITSTATUS(status),
         raw > 0 ? "ran" : "failed", WEXITSTATUS(raw_status));
  return 0;
}

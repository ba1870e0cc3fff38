// Runs a program and then prints `whole_ns=N`: the time from just before it was forked to its exit,
// as its parent sees it. That is its whole run: its loading, its start-up, its exit's frees and
// whatever a profiler does as it starts and as it exits, which a program timing only its own work
// never shows (bench/overhead.py). Exits 1 when the program did not exit 0.
//
//     whole_run PROGRAM [ARG]...
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: whole_run PROGRAM [ARG]...\n");
    return 2;
  }
  const long long start = now_ns();
  // fork, not vfork or posix_spawn: a profiler that follows children takes a forked one that
  // execs from its new program's start.
  const pid_t pid = fork();
  if (pid < 0) {
    perror("whole_run: fork");
    return 1;
  }
  if (pid == 0) {
    execv(argv[1], argv + 1);
    perror("whole_run: exec");
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) {
    perror("whole_run: waitpid");
    return 1;
  }
  const long long took = now_ns() - start;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  printf("whole_ns=%lld\n", took);
  return 0;
}

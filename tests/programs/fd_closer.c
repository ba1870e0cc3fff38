/* A program that closes every descriptor it did not open itself, as daemons and some launchers
 * do, then opens sockets of its own into those numbers and allocates on (tests/e2e/test_faults.py).
 * The profiler's socket is gone under it and its number is now the program's: no byte of the
 * profiler's may arrive there, and the program's sockets must not be shut down.
 * Prints "foreign=N broken=N" (bytes that arrived, sockets that stopped working); exits 1 unless
 * both are 0. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
enum { PAIRS = 16, FIRST_FD = 3, LAST_FD = 1024 };
static void* volatile g_sink;

NOINLINE void site_before_close(void) { for (int i = 0; i < 1000; i++) g_sink = malloc(256); }

NOINLINE void churn_after_close(void) {
  for (int i = 0; i < 200000; i++) {
    void* p = malloc(64 + i % 512);
    g_sink = p;
    free(p);
  }
}

int main(void) {
  site_before_close();
  for (int fd = FIRST_FD; fd < LAST_FD; fd++) close(fd);
  int pairs[PAIRS][2];
  for (int i = 0; i < PAIRS; i++) {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pairs[i]) != 0) {
      perror("socketpair");
      return 2;
    }
    for (int end = 0; end < 2; end++) {
      fcntl(pairs[i][end], F_SETFL, fcntl(pairs[i][end], F_GETFL) | O_NONBLOCK);
    }
  }
  churn_after_close();
  int foreign = 0, broken = 0;
  char buf[256];
  for (int i = 0; i < PAIRS; i++) {
    for (int end = 0; end < 2; end++) {
      ssize_t n = read(pairs[i][end], buf, sizeof(buf));
      if (n > 0) {
        foreign += (int)n;
      } else if (n == 0 || errno != EAGAIN) {
        broken++;  /* shut down under the program */
      }
    }
    if (write(pairs[i][0], "x", 1) != 1 || read(pairs[i][1], buf, 1) != 1) broken++;
  }
  printf("foreign=%d broken=%d\n", foreign, broken);
  return foreign != 0 || broken != 0;
}

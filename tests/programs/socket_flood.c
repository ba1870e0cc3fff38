/* A profiled process that floods its connection to droidheapd, where its client sends one byte
 * to wake a sleeping daemon, for tests/e2e/test_hostile_client.py: for up to SECONDS it sends as
 * much as the socket takes, then prints how much it sent and whether the daemon hung up.
 *   socket_flood SECONDS */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: socket_flood SECONDS\n");
    return 2;
  }
  free(malloc(64)); /* the client is connected by now */
  int sock = -1;
  for (int fd = 3; fd < 1024 && sock < 0; fd++) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) sock = fd;
  }
  if (sock < 0) {
    fprintf(stderr, "no connection to the daemon\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  static char bytes[65536];
  memset(bytes, 'w', sizeof(bytes));
  unsigned long long sent = 0;
  int hung_up = 0;
  const double end = now() + atof(argv[1]);
  while (!hung_up && now() < end) {
    ssize_t n = send(sock, bytes, sizeof(bytes), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) sent += (unsigned long long)n;
    hung_up = n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
  printf("sent %llu bytes, %s\n", sent, hung_up ? "hung up" : "still connected");
  return 0;
}

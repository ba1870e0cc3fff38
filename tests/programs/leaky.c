// A leak among the kinds of growth that are not one, for leak ranking, diff and check:
//   site_leak     32 KiB kept every 50 ms for 3 s: grows at every dump (the leak)
//   site_cache    768 KiB taken once, half way: one jump, then flat
//   site_churn    64 KiB taken and freed every 50 ms: allocates much, keeps nothing
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static void* volatile g_sink;
static void* g_cache[8];

NOINLINE void site_leak(void) {
  g_sink = malloc(32 * 1024);
  memset(g_sink, 1, 32 * 1024);
}

NOINLINE void site_cache(void) {
  for (int i = 0; i < 8; i++) g_cache[i] = malloc(96 * 1024);
  g_sink = g_cache;
}

NOINLINE void site_churn(void) {
  g_sink = malloc(64 * 1024);
  free(g_sink);
}

int main(void) {
  struct timespec step = {0, 50 * 1000 * 1000};
  for (int i = 0; i < 60; i++) {
    site_leak();
    site_churn();
    if (i == 30) site_cache();
    nanosleep(&step, NULL);
  }
  return 0;
}

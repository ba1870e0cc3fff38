// A leak among the kinds of growth that are not one, for leak ranking, diff and check:
//   site_leak     32 KiB kept every 50 ms for 3 s: grows at every dump (the leak)
//   site_cache    768 KiB taken once, half way: one jump, then flat
//   site_churn    64 KiB taken and freed every 50 ms: allocates much, keeps nothing
// `leaky free` then frees all it kept before it exits, as an interpreter's teardown does (Python,
// jq): the dump after its exit holds none of it, the dumps while it ran all of the growth.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))
enum { STEPS = 60, CACHE_BLOCKS = 8 };

static void* volatile g_sink;
static void* g_kept[STEPS];
static void* g_cache[CACHE_BLOCKS];

NOINLINE void site_leak(int step) {
  g_kept[step] = malloc(32 * 1024);
  memset(g_kept[step], 1, 32 * 1024);
}

NOINLINE void site_cache(void) {
  for (int i = 0; i < CACHE_BLOCKS; i++) g_cache[i] = malloc(96 * 1024);
  g_sink = g_cache;
}

NOINLINE void site_churn(void) {
  g_sink = malloc(64 * 1024);
  free(g_sink);
}

int main(int argc, char** argv) {
  struct timespec step = {0, 50 * 1000 * 1000};
  for (int i = 0; i < STEPS; i++) {
    site_leak(i);
    site_churn();
    if (i == STEPS / 2) site_cache();
    nanosleep(&step, NULL);
  }
  if (argc > 1 && strcmp(argv[1], "free") == 0) {
    for (int i = 0; i < STEPS; i++) free(g_kept[i]);
    for (int i = 0; i < CACHE_BLOCKS; i++) free(g_cache[i]);
  }
  return 0;
}

/* A program with allocation sites of known sizes, for end-to-end tests and the demo.
 *
 *   alloc_sites [--wait-file PATH] [--threads N] [--linger MS] [--linger-freeing MS]
 *               [--unrepeated N]
 *
 * Each site_* function allocates a known number of bytes, directly through one allocator entry
 * point; the totals are in tests/e2e/expected_sites.py. With --wait-file it first allocates a
 * little every 10 ms (so that an attaching profiler's ephemeral hook fires) until PATH exists.
 * With --linger it keeps running (allocating nothing more) for MS milliseconds before exiting;
 * with --linger-freeing it goes on allocating and freeing 16 bytes every millisecond meanwhile, as
 * an app's threads do (Android 10's heapprofd commits what a client sent only up to its latest
 * free, so a program that stops freeing keeps its last allocations out of every dump). With
 * --unrepeated it first makes N allocations of 64 B (freed at once) from call paths of 2048
 * depths in turn, more than a profiler's caches of stacks hold, so that every sample's stack is
 * copied and unwound: a stream no profiler keeps up with at every allocation.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void* volatile g_sink;

NOINLINE void site_leak_malloc(void) {  /* 4096 x 1024 B, kept */
  for (int i = 0; i < 4096; i++) g_sink = malloc(1024);
}

NOINLINE void site_churn_malloc_free(void) {  /* 4096 x 2048 B, all freed */
  for (int i = 0; i < 4096; i++) {
    g_sink = malloc(2048);  /* through the volatile sink, or the compiler drops the pair */
    free(g_sink);
  }
}

NOINLINE void* site_small_for_realloc(void) {
  void* p = malloc(100);
  g_sink = p;  /* a store after the call: no tail call at -O2 either, so this frame is seen */
  return p;
}

NOINLINE void site_grow_realloc(void) {  /* 256 x 16384 B, kept; the 100 B blocks are freed */
  for (int i = 0; i < 256; i++) g_sink = realloc(site_small_for_realloc(), 16384);
}

NOINLINE void site_posix_memalign(void) {  /* 512 x 4096 B, kept */
  for (int i = 0; i < 512; i++) {
    void* p;
    if (posix_memalign(&p, 64, 4096) == 0) g_sink = p;
  }
}

NOINLINE void site_aligned_alloc(void) {  /* 512 x 4096 B, kept */
  for (int i = 0; i < 512; i++) g_sink = aligned_alloc(64, 4096);
}

NOINLINE void site_thread_calloc(void) {  /* per thread: 1024 x (4 x 512 B), kept */
  for (int i = 0; i < 1024; i++) g_sink = calloc(4, 512);
}

static void* thread_main(void* arg) {
  (void)arg;
  site_thread_calloc();
  return NULL;
}

NOINLINE void site_unrepeated(int depth) {  /* 64 B, freed; a frame per level of depth */
  if (depth > 0) {
    site_unrepeated(depth - 1);
    __asm__ volatile("" ::: "memory");  /* keeps the call a call, not a loop */
    return;
  }
  g_sink = malloc(64);
  free(g_sink);
}

NOINLINE void heartbeat(void) {
  void* p = malloc(16);
  g_sink = p;
  free(p);
}

int main(int argc, char** argv) {
  const char* wait_file = NULL;
  int threads = 4;
  int linger_ms = 0;
  int linger_freeing_ms = 0;
  int unrepeated = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--wait-file") == 0 && i + 1 < argc) {
      wait_file = argv[++i];
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--linger") == 0 && i + 1 < argc) {
      linger_ms = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--linger-freeing") == 0 && i + 1 < argc) {
      linger_freeing_ms = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--unrepeated") == 0 && i + 1 < argc) {
      unrepeated = atoi(argv[++i]);
    } else {
      fprintf(stderr,
              "usage: %s [--wait-file PATH] [--threads N] [--linger MS] [--linger-freeing MS] "
              "[--unrepeated N]\n",
              argv[0]);
      return 2;
    }
  }
  if (wait_file) {
    printf("waiting pid=%d\n", (int)getpid());
    fflush(stdout);
    while (access(wait_file, F_OK) != 0) {
      heartbeat();
      usleep(10000);
    }
  }
  for (int i = 0; i < unrepeated; i++) site_unrepeated(i % 2048);
  site_leak_malloc();
  site_churn_malloc_free();
  site_grow_realloc();
  site_posix_memalign();
  site_aligned_alloc();
  pthread_t tids[64];
  if (threads > 64) threads = 64;
  for (int i = 0; i < threads; i++) pthread_create(&tids[i], NULL, thread_main, NULL);
  for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
  printf("done\n");
  fflush(stdout);
  if (linger_ms > 0) usleep((useconds_t)linger_ms * 1000);
  for (int i = 0; i < linger_freeing_ms; i++) {
    heartbeat();
    usleep(1000);
  }
  return 0;
}

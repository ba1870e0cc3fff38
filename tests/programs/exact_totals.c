// Allocates and frees through every call of the malloc family, counting as droidheap's exact totals
// do -- each block handed out and each block given back, at its usable size, a successful realloc
// as both -- and prints its own count at the end (tests/e2e/test_totals.py).
//   exact_totals [ROUNDS [THREADS]]
// The main thread runs ROUNDS rounds of the mix, then THREADS threads run ROUNDS each, eight at a
// time, so that threads end and new ones take their place. LIVE blocks stay allocated to the end.
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { LIVE = 3, BATCH = 8 };

static unsigned long long g_allocs, g_alloc_bytes, g_frees, g_free_bytes;
static void* volatile g_live[LIVE];

static void* counted(void* p) {
  if (p != NULL) {
    __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_alloc_bytes, malloc_usable_size(p), __ATOMIC_RELAXED);
  }
  return p;
}

static void release(void* p) {
  __atomic_fetch_add(&g_frees, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g_free_bytes, malloc_usable_size(p), __ATOMIC_RELAXED);
  free(p);
}

static void run_rounds(int rounds, int keep) {
  for (int round = 0; round < rounds; round++) {
    void* blocks[6];
    blocks[0] = counted(malloc(16 + round % 500));
    blocks[1] = counted(calloc(3, 100 + round % 50));
    void* aligned = NULL;
    if (posix_memalign(&aligned, 64, 200) == 0) counted(aligned);
    blocks[2] = aligned;
    blocks[3] = counted(aligned_alloc(128, 256));
    blocks[4] = counted(memalign(32, 72));
    void* grown = counted(malloc(40));
    size_t old_size = malloc_usable_size(grown);
    void* moved = realloc(grown, 5000 + round % 300);
    if (moved != NULL) {  // the old block given back, a new one handed out
      __atomic_fetch_add(&g_frees, 1, __ATOMIC_RELAXED);
      __atomic_fetch_add(&g_free_bytes, old_size, __ATOMIC_RELAXED);
      counted(moved);
    }
    blocks[5] = moved;
    for (int i = 0; i < 6; i++) {
      if (keep && round == rounds - 1 && i < LIVE) {
        g_live[i] = blocks[i];
      } else {
        release(blocks[i]);
      }
    }
  }
}

static int g_rounds;

static void* thread_main(void* arg) {
  (void)arg;
  run_rounds(g_rounds, 0);
  return NULL;
}

int main(int argc, char** argv) {
  g_rounds = argc > 1 ? atoi(argv[1]) : 1000;
  const int threads = argc > 2 ? atoi(argv[2]) : 0;
  run_rounds(g_rounds, 1);
  for (int started = 0; started < threads; started += BATCH) {
    pthread_t batch[BATCH];
    int n = threads - started < BATCH ? threads - started : BATCH;
    for (int i = 0; i < n; i++) pthread_create(&batch[i], NULL, thread_main, NULL);
    for (int i = 0; i < n; i++) pthread_join(batch[i], NULL);
  }
  printf("allocs=%llu alloc_bytes=%llu frees=%llu free_bytes=%llu\n", g_allocs, g_alloc_bytes,
         g_frees, g_free_bytes);
  fflush(stdout);
  return 0;
}

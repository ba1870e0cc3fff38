// Threads that free and reallocate each other's blocks, and no signal (tests/e2e/test_profile.py):
//
//   handed_frees OPS   8 threads each run OPS operations on 32 slots: a malloc from site_churn, a
//                      realloc from site_churn_realloc, a free, or a block handed to a shared pool
//                      that any thread takes from and frees. Every such block is freed before the
//                      threads end; then each thread allocates 16 blocks of 777 B from site_kept
//                      and keeps them. Prints "kept=128".
//
// Threads that take turns writing to one ring of the shared buffer move to rings of their own (at
// -i 1 too), so a block is often allocated in one ring and freed from another thread, in another,
// its address reused meanwhile. The profile at exit must still show site_churn and
// site_churn_realloc with nothing in use and site_kept with exactly 128 x 777 B.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

enum { THREADS = 8, SLOTS = 32, POOL = 512, KEPT = 16, KEPT_SIZE = 777 };

static long g_ops;
static void* g_kept[THREADS][KEPT];

static struct {
  pthread_mutex_t lock;
  void* blocks[POOL];
  int count;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static int hand_over(void* block) {
  pthread_mutex_lock(&g_pool.lock);
  int taken = g_pool.count < POOL;
  if (taken) g_pool.blocks[g_pool.count++] = block;
  pthread_mutex_unlock(&g_pool.lock);
  return taken;
}

static void* take_over(void) {
  pthread_mutex_lock(&g_pool.lock);
  void* block = g_pool.count > 0 ? g_pool.blocks[--g_pool.count] : NULL;
  pthread_mutex_unlock(&g_pool.lock);
  return block;
}

static uint64_t next_random(uint64_t* state) {  // xorshift64
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

static void* checked(void* block) {
  if (block == NULL) {
    fprintf(stderr, "handed_frees: out of memory\n");
    exit(1);
  }
  return block;
}

NOINLINE void* site_churn(size_t size) { return checked(malloc(size)); }
NOINLINE void* site_churn_realloc(void* block, size_t size) {
  return checked(realloc(block, size));
}
NOINLINE void* site_kept(void) { return checked(malloc(KEPT_SIZE)); }

static void* run(void* arg) {
  int index = (int)(intptr_t)arg;
  void* slots[SLOTS] = {0};
  uint64_t rng = 0x9e3779b97f4a7c15u * (uint64_t)(index + 1);
  for (long op = 0; op < g_ops; op++) {
    uint64_t r = next_random(&rng);
    void** slot = &slots[r % SLOTS];
    size_t size = 16 + (r >> 8) % 2048;
    switch ((r >> 32) % 5) {
      case 0:
      case 1:
        free(*slot);
        *slot = site_churn(size);
        break;
      case 2:
        *slot = site_churn_realloc(*slot, size);
        break;
      case 3:
        if (*slot != NULL && hand_over(*slot)) *slot = NULL;
        break;
      default:
        free(take_over());
        break;
    }
  }
  for (int i = 0; i < SLOTS; i++) free(slots[i]);
  for (int i = 0; i < KEPT; i++) g_kept[index][i] = site_kept();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: handed_frees OPS\n");
    return 2;
  }
  g_ops = atol(argv[1]);
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, run, (void*)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  for (void* block; (block = take_over()) != NULL;) free(block);
  printf("kept=%d\n", THREADS * KEPT);
  return 0;
}

// A heap for the unreachable-memory sweep (bench/unreachable.py): MIB MiB of blocks of 16..4096
// bytes, each pointing at a random earlier one (a graph, as real heaps are, not a list), all held
// by one table but every tenth, dropped. A watcher thread then allocates and frees for SECONDS,
// blocks of 16..4096 bytes freed in random order (a program goes on allocating while it is swept),
// reading the clock each time, and prints the longest gap it saw: the longest the program stood
// still.
//   reachable_heap [MIB] [SECONDS]
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void** volatile g_blocks;
static double g_seconds = 3;
static uint64_t g_longest_gap_us;

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static void* watch(void* arg) {
  (void)arg;
  void* ring[256] = {0};
  uint64_t state = 2463534242u;
  const uint64_t end = now_us() + (uint64_t)(g_seconds * 1e6);
  for (uint64_t last = now_us(), now; (now = now_us()) < end; last = now) {
    if (now - last > g_longest_gap_us) g_longest_gap_us = now - last;
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const size_t slot = state % 256;
    free(ring[slot]);
    ring[slot] = malloc(16 + (state >> 8) % 4081);
  }
  for (size_t i = 0; i < 256; i++) free(ring[i]);
  return 0;
}

int main(int argc, char** argv) {
  const uint64_t bytes = (uint64_t)(argc > 1 ? atof(argv[1]) : 1024) << 20;
  if (argc > 2) g_seconds = atof(argv[2]);
  uint64_t state = 88172645463325252ull, total = 0;
  size_t count = 0, capacity = 1 << 20;
  void** blocks = malloc(capacity * sizeof(void*));
  while (total < bytes) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const size_t size = 16 + state % 4081;
    void** block = malloc(size);
    memset(block, 0, size);
    block[0] = count ? blocks[state % count] : 0;
    if (count == capacity) blocks = realloc(blocks, (capacity *= 2) * sizeof(void*));
    blocks[count++] = block;
    total += size;
  }
  for (size_t i = 0; i < count; i += 10) blocks[i] = 0;
  g_blocks = blocks;
  pthread_t watcher;
  pthread_create(&watcher, 0, watch, 0);
  pthread_join(watcher, 0);
  printf("heap_bytes %llu blocks %zu longest_gap_us %llu\n", (unsigned long long)total, count,
         (unsigned long long)g_longest_gap_us);
  return 0;
}

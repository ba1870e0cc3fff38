/* Two allocators of the program's own, reported through droidheap/heaps.h (the copy installed
 * beside the client):
 *   "pool"   fixed blocks of POOL_BLOCK bytes cut from one malloc'd arena, on a free list; its
 *            first block has the arena's address (a heap's block and libc's at one address);
 *   "arena"  a bump allocator, its blocks freed all at once by a reset.
 *
 *   custom_heap [--wait-file PATH] [--threads N] ROUNDS
 *
 * Registers both heaps first and prints "registered pid=PID"; with --wait-file it then waits for
 * PATH to exist, allocating a little now and then (a profiler attaches meanwhile). Then N
 * threads (default 1) each run ROUNDS rounds: pool_site takes 8 blocks and gives back 6;
 * arena_site takes 3 blocks of 1000 bytes, and every 4th round the arena is reset. Each heap's own
 * count of what it reported is printed at the end ("pool allocs=... alloc_bytes=... frees=...
 * free_bytes=..."), then "done". */
#include <droidheap/heaps.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_BLOCK 256
#define POOL_BLOCKS 65536
#define ARENA_BYTES (16 << 20)

struct counts {
  long allocs, alloc_bytes, frees, free_bytes;
};

static droidheap_heap* pool_heap;
static droidheap_heap* arena_heap;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char* pool_memory;
static void* pool_free_list;
static struct counts pool_counts, arena_counts;

static void count(struct counts* c, int alloc, long bytes) {
  if (alloc) {
    c->allocs++;
    c->alloc_bytes += bytes;
  } else {
    c->frees++;
    c->free_bytes += bytes;
  }
}

static void pool_init(void) {
  pool_memory = malloc((size_t)POOL_BLOCK * POOL_BLOCKS);
  for (int i = POOL_BLOCKS - 1; i >= 0; i--) {
    void* block = pool_memory + (size_t)i * POOL_BLOCK;
    *(void**)block = pool_free_list;
    pool_free_list = block;
  }
}

static void* pool_alloc(void) {
  pthread_mutex_lock(&lock);
  void* block = pool_free_list;
  if (block == NULL) abort();
  pool_free_list = *(void**)block;
  count(&pool_counts, 1, POOL_BLOCK);
  pthread_mutex_unlock(&lock);
  droidheap_report_alloc(pool_heap, block, POOL_BLOCK);
  return block;
}

static void pool_free(void* block) {
  droidheap_report_free(pool_heap, block, POOL_BLOCK);
  pthread_mutex_lock(&lock);
  *(void**)block = pool_free_list;
  pool_free_list = block;
  count(&pool_counts, 0, POOL_BLOCK);
  pthread_mutex_unlock(&lock);
}

/* One arena per thread. */
struct arena {
  char* base;
  size_t used;
  void* blocks[64];
  size_t sizes[64];
  int count;
};

static void* arena_alloc(struct arena* a, size_t size) {
  if (a->count == 64 || a->used + size > ARENA_BYTES) abort();
  void* block = a->base + a->used;
  a->used += size;
  a->blocks[a->count] = block;
  a->sizes[a->count++] = size;
  pthread_mutex_lock(&lock);
  count(&arena_counts, 1, (long)size);
  pthread_mutex_unlock(&lock);
  droidheap_report_alloc(arena_heap, block, size);
  return block;
}

static void arena_reset(struct arena* a) {
  for (int i = 0; i < a->count; i++) {
    droidheap_report_free(arena_heap, a->blocks[i], a->sizes[i]);
    pthread_mutex_lock(&lock);
    count(&arena_counts, 0, (long)a->sizes[i]);
    pthread_mutex_unlock(&lock);
  }
  a->used = 0;
  a->count = 0;
}

__attribute__((noinline)) void pool_site(void** kept, int* kept_count) {
  void* blocks[8];
  for (int i = 0; i < 8; i++) blocks[i] = pool_alloc();
  for (int i = 0; i < 6; i++) pool_free(blocks[i]);
  kept[(*kept_count)++] = blocks[6];
  kept[(*kept_count)++] = blocks[7];
}

__attribute__((noinline)) void arena_site(struct arena* a) {
  for (int i = 0; i < 3; i++) memset(arena_alloc(a, 1000), 1, 16);
}

static int rounds;

static void* run(void* unused) {
  (void)unused;
  struct arena a = {malloc(ARENA_BYTES), 0, {0}, {0}, 0};
  void** kept = malloc(sizeof(void*) * 2 * (size_t)rounds);
  int kept_count = 0;
  for (int r = 0; r < rounds; r++) {
    pool_site(kept, &kept_count);
    arena_site(&a);
    if (r % 4 == 3) arena_reset(&a);
  }
  /* What stays in use: the pool's kept blocks and the arena's blocks since its last reset. */
  free(kept);
  free(a.base);
  return NULL;
}

int main(int argc, char** argv) {
  const char* wait_file = NULL;
  int threads = 1;
  int i = 1;
  for (; i < argc - 1; i++) {
    if (strcmp(argv[i], "--wait-file") == 0) {
      wait_file = argv[++i];
    } else if (strcmp(argv[i], "--threads") == 0) {
      threads = atoi(argv[++i]);
    } else {
      break;
    }
  }
  if (i != argc - 1 || threads < 1 || threads > 64 || (rounds = atoi(argv[i])) < 1 ||
      (long)rounds * 8 * threads > POOL_BLOCKS) {
    fprintf(stderr, "usage: %s [--wait-file PATH] [--threads N] ROUNDS\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  pool_heap = droidheap_register_heap("pool");
  arena_heap = droidheap_register_heap("arena");
  pool_init();
  printf("registered pid=%d\n", (int)getpid());
  if (wait_file) {
    /* A heartbeat: the emulated device loads the profiler at an allocation after its signal. */
    while (access(wait_file, F_OK) != 0) {
      void* volatile heartbeat = malloc(16);  /* volatile: kept, not folded away */
      free(heartbeat);
      usleep(10 * 1000);
    }
  }
  pthread_t tids[64];
  for (int t = 0; t < threads; t++) pthread_create(&tids[t], NULL, run, NULL);
  for (int t = 0; t < threads; t++) pthread_join(tids[t], NULL);
  printf("pool allocs=%ld alloc_bytes=%ld frees=%ld free_bytes=%ld\n", pool_counts.allocs,
         pool_counts.alloc_bytes, pool_counts.frees, pool_counts.free_bytes);
  printf("arena allocs=%ld alloc_bytes=%ld frees=%ld free_bytes=%ld\n", arena_counts.allocs,
         arena_counts.alloc_bytes, arena_counts.frees, arena_counts.free_bytes);
  printf("done\n");
  return 0;
}

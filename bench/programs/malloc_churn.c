// The overhead benchmark's workload (bench/overhead): THREADS threads, each making ALLOCS
// allocations of random sizes in [MIN, MAX] bytes, its first or last byte written, while keeping
// WINDOW blocks live: a new block takes a random slot of the window, whose block is freed, so
// that frees come in any order, as a program's do, and meet cold lines (-f: the oldest slot's, in
// order, FIFO). Every KEEP-th block (-k, default 1000; 0: none) is kept until the end instead, as
// a program's long-lived data is. With -x every other block goes into the next
// thread's window, so that half the frees happen on another thread than the malloc; with -r PCT,
// that share of the operations grows a live block with realloc instead; with -d DEPTH, each thread
// allocates from DEPTH nested function frames, so that a profiler unwinds stacks that deep; with
// -S BYTES each thread keeps that many bytes of live stack above its allocating frames (a buffer
// in its first frame, as threads keep their own data; its window lives there when it fits, its
// slots written at every allocation), so that a stack copy from the allocation up holds them. With
// -c HEAP the allocator is not called at all: each allocation and free is a report to the custom
// heap HEAP (droidheap/heaps.h) of a window slot's address, what a program's own allocator adds
// to tell a profiler (-x, -r and -k do not apply then).
//
// Prints its own elapsed time and the CPU time of all its threads, from the moment every thread is
// ready to the last one's end, so that start-up, attaching and tearing down the profiler are not
// counted, then its peak resident set size as the kernel's VmHWM line of /proc/self/status:
//   elapsed_ns=N allocations=N cpu_ns=N
//   VmHWM:   N kB
//
// usage: malloc_churn [-t THREADS] [-n ALLOCS] [-w WINDOW] [-s MIN:MAX] [-r PCT] [-d DEPTH]
//                     [-S BYTES] [-k KEEP] [-f] [-x] [-c HEAP]
#include <alloca.h>
#include <droidheap/heaps.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_threads = 1;
static long g_allocs = 2000000;
static int g_window = 1024;
static size_t g_min = 16, g_max = 4096;
static int g_realloc_pct = 0;
static int g_cross = 0;
static int g_depth = 0;
static size_t g_stack_bytes = 0;  // -S
static long g_keep = 1000;
static int g_fifo = 0;
static droidheap_heap* g_heap = NULL;  // -c
static void** g_windows;  // g_threads windows of g_window slots (on the heap)
static void*** g_window_of;  // each thread's window: in g_windows, or on its stack with -S
static void** g_kept;     // g_threads runs of kept_per_thread() blocks, freed at the end
static pthread_barrier_t g_start;

static uint64_t next_random(uint64_t* state) {  // xorshift64*
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545f4914f6cdd1dull;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// CPU time of every thread of this process: the profiler's client works on the program's threads,
// droidheapd in a process of its own.
static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t kept_per_thread(void) { return g_keep > 0 ? (size_t)(g_allocs / g_keep) : 0; }

// Not inlined: bench/overhead.py counts the instructions run inside it (callgrind's
// --toggle-collect=churn), the allocation loop without the thread's start and end.
__attribute__((noinline)) static void churn(long id) {
  uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
  size_t span = g_max - g_min + 1;
  void** kept = g_kept + (size_t)id * kept_per_thread();
  for (long i = 0; i < g_allocs; ++i) {
    uint64_t r = next_random(&state);
    size_t slot = g_fifo ? (size_t)(i % g_window) : (size_t)(next_random(&state) % g_window);
    size_t size = g_min + (size_t)(r % span);
    size_t touched = (r >> 63) ? size - 1 : 0;  // the first byte or the last
    if (g_heap == NULL && g_keep > 0 && i % g_keep == g_keep - 1) {
      void* block = malloc(size);
      if (block == NULL) abort();
      ((volatile char*)block)[touched] = 1;
      *kept++ = block;
      continue;
    }
    if (g_heap != NULL) {
      // The slot holds the size of the block reported there last, freed before the next.
      void** cell = g_window_of[id] + slot;
      if (*cell != NULL) droidheap_report_free(g_heap, cell, (size_t)*cell);
      droidheap_report_alloc(g_heap, cell, size);
      *cell = (void*)size;
      continue;
    }
    if (g_realloc_pct > 0 && (int)((r >> 32) % 100) < g_realloc_pct) {
      // Grow this thread's own block in place of a fresh one (realloc needs its owner's window).
      void** own = g_window_of[id] + slot;
      void* old = __atomic_exchange_n(own, NULL, __ATOMIC_ACQ_REL);
      void* grown = realloc(old, size);
      if (grown == NULL) abort();
      ((volatile char*)grown)[touched] = 1;
      old = __atomic_exchange_n(own, grown, __ATOMIC_ACQ_REL);
      free(old);
      continue;
    }
    void* block = malloc(size);
    if (block == NULL) abort();
    ((volatile char*)block)[touched] = 1;  // touch it, as a program would
    long owner = g_cross ? (id + (i & 1)) % g_threads : id;
    free(__atomic_exchange_n(&g_window_of[owner][slot], block, __ATOMIC_ACQ_REL));
  }
}

// One frame per level: noinline keeps each call, and the empty asm after it (which the compiler
// must run once the call returns) keeps the call from becoming a jump, a tail call or a loop.
__attribute__((noinline)) static void nest(long id, int depth) {
  if (depth == 0) {
    churn(id);
    return;
  }
  nest(id, depth - 1);
  __asm__ volatile("" ::: "memory");
}

static void* thread_main(void* arg) {
  long id = (long)arg;
  size_t window_bytes = (size_t)g_window * sizeof(void*);
  if (g_stack_bytes > 0) {
    char* kept = alloca(g_stack_bytes);
    memset(kept, 0, g_stack_bytes);  // live, as a thread's own data is
    if (g_stack_bytes >= window_bytes) g_window_of[id] = (void**)kept;
    __asm__ volatile("" : : "r"(kept) : "memory");
  }
  pthread_barrier_wait(&g_start);
  nest(id, g_depth);
  // The windows on the stacks are emptied while they live; every thread is done allocating.
  pthread_barrier_wait(&g_start);
  if (g_window_of[id] != g_windows + (size_t)id * (size_t)g_window) {
    for (int i = 0; g_heap == NULL && i < g_window; ++i) free(g_window_of[id][i]);
    g_window_of[id] = NULL;
  }
  return NULL;
}

// The kernel's own line: VmHWM, unlike getrusage's ru_maxrss, does not count the memory of the
// image this process replaced at exec (the forked launcher's, for a program run from Python).
static void print_peak_rss(void) {
  FILE* status = fopen("/proc/self/status", "r");
  if (status == NULL) return;
  char line[256];
  while (fgets(line, sizeof(line), status) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) fputs(line, stdout);
  }
  fclose(status);
}

static int parse_args(int argc, char** argv) {
  int opt;
  while ((opt = getopt(argc, argv, "t:n:w:s:r:d:S:k:fxc:")) != -1) {
    switch (opt) {
      case 't': g_threads = atoi(optarg); break;
      case 'n': g_allocs = atol(optarg); break;
      case 'w': g_window = atoi(optarg); break;
      case 's':
        if (sscanf(optarg, "%zu:%zu", &g_min, &g_max) != 2) return 0;
        break;
      case 'r': g_realloc_pct = atoi(optarg); break;
      case 'd': g_depth = atoi(optarg); break;
      case 'S': g_stack_bytes = (size_t)atol(optarg); break;
      case 'k': g_keep = atol(optarg); break;
      case 'f': g_fifo = 1; break;
      case 'x': g_cross = 1; break;
      case 'c': g_heap = droidheap_register_heap(optarg); break;
      default: return 0;
    }
  }
  return g_threads > 0 && g_allocs > 0 && g_window > 0 && g_min > 0 && g_max >= g_min &&
         g_realloc_pct >= 0 && g_realloc_pct <= 100 && g_depth >= 0 &&
         g_keep >= 0;
}

int main(int argc, char** argv) {
  if (!parse_args(argc, argv)) {
    fprintf(stderr, "usage: %s [-t THREADS] [-n ALLOCS] [-w WINDOW] [-s MIN:MAX] [-r PCT] "
            "[-d DEPTH] [-S BYTES] [-k KEEP] [-f] [-x] [-c HEAP]\n", argv[0]);
    return 2;
  }
  g_windows = calloc((size_t)g_threads * (size_t)g_window, sizeof(void*));
  g_kept = calloc((size_t)g_threads * kept_per_thread() + 1, sizeof(void*));
  g_window_of = calloc((size_t)g_threads, sizeof(void**));
  pthread_t* threads = calloc((size_t)g_threads, sizeof(pthread_t));
  if (g_windows == NULL || g_kept == NULL || g_window_of == NULL || threads == NULL) return 1;
  for (size_t i = 0; i < (size_t)g_threads; ++i) g_window_of[i] = g_windows + i * (size_t)g_window;
  pthread_attr_t attr;
  pthread_attr_init(&attr);  // room for -S beside the default stack's use
  pthread_attr_setstacksize(&attr, g_stack_bytes + (8u << 20));
  pthread_barrier_init(&g_start, NULL, (unsigned)g_threads + 1);
  for (long i = 0; i < g_threads; ++i) pthread_create(&threads[i], &attr, thread_main, (void*)i);
  pthread_barrier_wait(&g_start);
  uint64_t begin = now_ns();
  uint64_t cpu_begin = cpu_ns();
  pthread_barrier_wait(&g_start);  // every thread done
  uint64_t elapsed = now_ns() - begin;
  uint64_t cpu = cpu_ns() - cpu_begin;
  for (int i = 0; i < g_threads; ++i) pthread_join(threads[i], NULL);
  for (size_t i = 0; g_heap == NULL && i < (size_t)g_threads * (size_t)g_window; ++i) {
    free(g_windows[i]);
  }
  for (size_t i = 0; i < (size_t)g_threads * kept_per_thread(); ++i) free(g_kept[i]);
  printf("elapsed_ns=%llu allocations=%lld cpu_ns=%llu\n", (unsigned long long)elapsed,
         (long long)g_allocs * g_threads, (unsigned long long)cpu);
  print_peak_rss();
  return 0;
}

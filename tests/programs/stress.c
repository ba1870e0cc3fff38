/* A program that checks every byte it allocates, for the stress tests (tests/e2e/test_stress.py):
 *
 *   stress OPS [EXEC ARGS...]   32 threads at a time (three generations of them, so threads keep
 *                               being created and ended) each run OPS operations of malloc, calloc,
 *                               realloc, posix_memalign and free on blocks filled with a pattern
 *                               and checked before they are given back; a third of the blocks are
 *                               freed by another thread. Meanwhile signals keep arriving during
 *                               allocation (SIGUSR1: its handler only counts; SIGUSR2: its handler
 *                               allocates, checks and frees, unless it interrupted libc itself,
 *                               which no allocator survives), and the main thread forks children
 *                               that allocate and exit, and forks children that exec EXEC ARGS.
 *   stress child                what an exec'd child runs: allocates, checks, exits 7.
 *
 * Prints "checksum=<sum of every byte it checked in its own operations> ops=<count>", the same
 * whatever the scheduling, and exits 0; exits 1 on a byte that changed, 3 when the watchdog (two
 * minutes per generation) finds it stuck. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

enum { THREADS = 32, GENERATIONS = 3, SLOTS = 64, HANDOFF = 256, WATCHDOG_S = 120 };

static void fail(const char* what) {
  fprintf(stderr, "stress: %s\n", what);
  fflush(stderr);
  _exit(1);
}

static uint64_t next_random(uint64_t* state) {  /* xorshift64 */
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/* A block starts with its size and seed; the rest is a pattern derived from the seed. */
struct block {
  size_t size;
  uint64_t seed;
};

static uint8_t pattern(uint64_t seed, size_t i) { return (uint8_t)(seed * 31 + i * 7 + (i >> 8)); }

static void fill(struct block* b, size_t size, uint64_t seed) {
  b->size = size;
  b->seed = seed;
  uint8_t* bytes = (uint8_t*)(b + 1);
  for (size_t i = 0; i < size - sizeof(*b); i++) bytes[i] = pattern(seed, i);
}

/* The sum of its bytes, after checking each; `upto` bounds what is checked (a realloc keeps the
 * smaller size's bytes). */
static uint64_t check(const struct block* b, size_t upto) {
  const uint8_t* bytes = (const uint8_t*)(b + 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < upto - sizeof(*b); i++) {
    if (bytes[i] != pattern(b->seed, i)) fail("a block's content changed");
    sum += bytes[i];
  }
  return sum;
}

static _Atomic uint64_t g_checksum;
static _Atomic uint64_t g_ops;
static _Atomic uint64_t g_handler_allocations;
static _Atomic uint64_t g_handler_signals;

/* Blocks one thread allocated and another frees. */
static struct {
  pthread_mutex_t lock;
  struct block* blocks[HANDOFF];
  int count;
} g_handoff = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static int give(struct block* b) {
  pthread_mutex_lock(&g_handoff.lock);
  int given = g_handoff.count < HANDOFF;
  if (given) g_handoff.blocks[g_handoff.count++] = b;
  pthread_mutex_unlock(&g_handoff.lock);
  return given;
}

static struct block* take(void) {
  pthread_mutex_lock(&g_handoff.lock);
  struct block* b = g_handoff.count > 0 ? g_handoff.blocks[--g_handoff.count] : NULL;
  pthread_mutex_unlock(&g_handoff.lock);
  return b;
}

static size_t random_size(uint64_t* rng) {
  uint64_t r = next_random(rng);
  size_t size = sizeof(struct block) + 1 + r % 512;
  if (r % 64 == 0) size += 64 * 1024;  /* now and then a large one */
  return size;
}

static void release(struct block* b) {
  g_checksum += check(b, b->size);
  free(b);
}

/* `handoff`: whether blocks go to and come from other threads (not in a forked child, whose copy
 * of the handoff's lock may have been held by a thread that is not there). */
static void run_operations(uint64_t seed, long ops, int handoff) {
  struct block* slots[SLOTS] = {0};
  uint64_t rng = seed | 1;
  for (long op = 0; op < ops; op++) {
    int slot = (int)(next_random(&rng) % SLOTS);
    struct block* b = slots[slot];
    size_t size = random_size(&rng);
    uint64_t block_seed = next_random(&rng);
    switch (next_random(&rng) % 6) {
      case 0:  /* malloc */
      case 1: {
        if (b) release(b);
        b = malloc(size);
        if (!b) fail("malloc failed");
        fill(b, size, block_seed);
        break;
      }
      case 2: {  /* calloc: zeroed */
        if (b) release(b);
        b = calloc(1, size);
        if (!b) fail("calloc failed");
        for (size_t i = 0; i < size; i++) {
          if (((uint8_t*)b)[i] != 0) fail("calloc's block is not zeroed");
        }
        fill(b, size, block_seed);
        break;
      }
      case 3: {  /* realloc: what both sizes hold is kept */
        if (!b) {
          b = realloc(NULL, size);
          if (!b) fail("realloc(NULL) failed");
        } else {
          size_t old_size = b->size;
          uint64_t old_seed = b->seed;
          b = realloc(b, size);
          if (!b) fail("realloc failed");
          b->size = size;  /* the header survived; check the kept bytes as they were */
          b->seed = old_seed;
          g_checksum += check(b, old_size < size ? old_size : size);
        }
        fill(b, size, block_seed);
        break;
      }
      case 4: {  /* posix_memalign */
        if (b) release(b);
        void* p = NULL;
        size_t alignment = (size_t)16 << (next_random(&rng) % 8);
        if (posix_memalign(&p, alignment, size) != 0) fail("posix_memalign failed");
        if ((uintptr_t)p % alignment != 0) fail("posix_memalign's block is misaligned");
        b = p;
        fill(b, size, block_seed);
        break;
      }
      default: {  /* free, here or on another thread */
        if (b && (!handoff || next_random(&rng) % 3 != 0 || !give(b))) release(b);
        b = handoff ? take() : NULL;
        if (b) release(b);
        b = NULL;
        break;
      }
    }
    slots[slot] = b;
    g_ops++;
  }
  for (int i = 0; i < SLOTS; i++) {
    if (slots[i]) release(slots[i]);
  }
}

/* libc's, the dynamic linker's and the vDSO's executable mappings (32-bit x86 makes its system
 * calls from the vDSO): a signal that lands in them may have interrupted the allocator, or a lock
 * it needs. */
static struct { uintptr_t start, end; } g_libc[16];
static int g_libc_count;

static void find_libc(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) fail("cannot read /proc/self/maps");
  char line[512];
  while (fgets(line, sizeof(line), maps) && g_libc_count < 16) {
    unsigned long start, end;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && perms[2] == 'x' &&
        (strstr(line, "/libc.so") || strstr(line, "/libc-") || strstr(line, "/ld-linux") ||
         strstr(line, "[vdso]"))) {
      g_libc[g_libc_count].start = start;
      g_libc[g_libc_count].end = end;
      g_libc_count++;
    }
  }
  fclose(maps);
  if (g_libc_count == 0) fail("libc is not mapped");
}

static uintptr_t interrupted_pc(const ucontext_t* context) {
#if defined(__x86_64__)
  return (uintptr_t)context->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
  return (uintptr_t)context->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
  return (uintptr_t)context->uc_mcontext.pc;
#else
#error "which register is the pc?"
#endif
}

static void count_signal(int signum) {
  (void)signum;
  g_handler_signals++;
}

static void allocate_in_handler(int signum, siginfo_t* info, void* context) {
  (void)signum;
  (void)info;
  uintptr_t pc = interrupted_pc(context);
  for (int i = 0; i < g_libc_count; i++) {
    if (pc >= g_libc[i].start && pc < g_libc[i].end) return;
  }
  /* Interrupted in the program, or in the profiler's hooks: allocating must work. */
  struct block* b = malloc(sizeof(struct block) + 100);
  if (!b) fail("malloc in a signal handler failed");
  fill(b, sizeof(struct block) + 100, (uint64_t)(uintptr_t)b);
  check(b, b->size);
  free(b);
  g_handler_allocations++;
}

struct worker {
  pthread_t thread;
  uint64_t seed;
  long ops;
  _Atomic int done;  /* ended, not yet joined: it may still be signalled */
};

static void* work(void* arg) {
  struct worker* w = arg;
  run_operations(w->seed, w->ops, 1);
  w->done = 1;
  return NULL;
}

static volatile sig_atomic_t g_generation_done;

/* Sends both signals to the workers, at random, until the generation is done. */
static void* signal_workers(void* arg) {
  struct worker* workers = arg;
  uint64_t rng = 12345;
  while (!g_generation_done) {
    struct worker* w = &workers[next_random(&rng) % THREADS];
    pthread_kill(w->thread, next_random(&rng) % 2 ? SIGUSR1 : SIGUSR2);
    usleep(200);
  }
  return NULL;
}

static void fork_children(char** exec_argv) {
  for (int i = 0; i < 2; i++) {
    pid_t child = fork();
    if (child < 0) fail("fork failed");
    if (child == 0) {
      if (exec_argv) {
        execv(exec_argv[0], exec_argv);
        _exit(127);
      }
      run_operations(99 + i, 500, 0);  /* not in the checksum: the child's own sums */
      _exit(7);
    }
    int status;
    while (waitpid(child, &status, 0) < 0) {}  /* EINTR: no handler here, but be sure */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 7) fail("a child did not exit with 7");
  }
}

static void watchdog(int signum) {
  (void)signum;
  static const char message[] = "stress: watchdog: a generation took two minutes\n";
  write(2, message, sizeof(message) - 1);
  _exit(3);
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "child") == 0) {
    run_operations(7, 500, 0);
    return 7;
  }
  if (argc < 2 || atol(argv[1]) <= 0) {
    fprintf(stderr, "usage: stress OPS [EXEC ARGS...] | stress child\n");
    return 2;
  }
  long ops = atol(argv[1]);
  char** exec_argv = argc > 2 ? argv + 2 : NULL;
  find_libc();
  signal(SIGALRM, watchdog);
  /* Neither handler interrupts the other: the pc the allocating one looks at must be the one
   * the thread's own code was at. */
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGUSR1);
  sigaddset(&both, SIGUSR2);
  struct sigaction counting = {0};
  counting.sa_handler = count_signal;
  counting.sa_mask = both;
  counting.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &counting, NULL);
  struct sigaction allocating = {0};
  allocating.sa_sigaction = allocate_in_handler;
  allocating.sa_mask = both;
  allocating.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGUSR2, &allocating, NULL);
  static struct worker workers[THREADS];
  for (int generation = 0; generation < GENERATIONS; generation++) {
    alarm(WATCHDOG_S);
    g_generation_done = 0;
    for (int i = 0; i < THREADS; i++) {
      workers[i].seed = (uint64_t)(generation * THREADS + i + 1) * 0x9e3779b97f4a7c15ull;
      workers[i].ops = ops;
      workers[i].done = 0;
      if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0) {
        fail("pthread_create failed");
      }
    }
    pthread_t signaller;
    pthread_create(&signaller, NULL, signal_workers, workers);
    fork_children(NULL);
    if (exec_argv) fork_children(exec_argv);
    /* The signaller stops before any worker is joined: a joined thread's id is no more. */
    for (int i = 0; i < THREADS; i++) {
      while (!workers[i].done) usleep(1000);
    }
    g_generation_done = 1;
    pthread_join(signaller, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(workers[i].thread, NULL);
  }
  alarm(0);
  struct block* b;
  while ((b = take())) release(b);
  printf("checksum=%llu ops=%llu\n", (unsigned long long)g_checksum, (unsigned long long)g_ops);
  fprintf(stderr, "stress: %llu signals counted, %llu allocations in a signal handler\n",
          (unsigned long long)g_handler_signals, (unsigned long long)g_handler_allocations);
  return 0;
}

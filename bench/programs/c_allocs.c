// Allocations from C code built -O2 -fomit-frame-pointer, for bench/unwind_agreement.py: direct
// malloc/calloc/realloc, strdup, inside qsort's comparison callback, and at the bottom of a deep
// recursion through functions of different frame shapes; from the main thread and several others.
//   c_allocs [ROUNDS]     default 40
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))
// Keeps a value in a register across the end of a function: the call before it is not a tail call.
#define KEEP(x) __asm__ volatile("" : "+r"(x))

enum { kThreads = 4, kRecursionDepth = 64 };

static void* volatile g_sink;

static NOINLINE void Retain(void* p) {
  g_sink = p;
  free(p);
}

static NOINLINE void DirectAllocations(int round) {
  char* a = malloc(24 + round % 40);
  int* b = calloc(16, sizeof(int));
  a[0] = 1;
  b[1] = 2;
  char* c = realloc(a, 300 + round);
  c = realloc(c, 5000);
  Retain(b);
  Retain(c);
}

static NOINLINE void Strings(int round) {
  char text[64];
  snprintf(text, sizeof(text), "round %d of the strdup test", round);
  char* copy = strdup(text);
  char* shorter = strndup(text, 5);
  Retain(copy);
  Retain(shorter);
}

static int NOINLINE CompareAllocating(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  if (((unsigned)x & 7u) == 0) {
    int* scratch = malloc(sizeof(int) * 4);
    scratch[0] = x;
    Retain(scratch);
  }
  return (x > y) - (x < y);
}

static NOINLINE void SortWithCallback(int round) {
  int values[24];
  for (int i = 0; i < 24; ++i) values[i] = (i * 7919 + round * 31) % 101;
  qsort(values, 24, sizeof(int), CompareAllocating);
  g_sink = (void*)(intptr_t)values[0];
}

// Recursion: three frame shapes, chosen by the level.
static NOINLINE uint64_t RecurseA(int level, uint64_t salt);
static NOINLINE uint64_t RecurseB(int level, uint64_t salt);
static NOINLINE uint64_t RecurseC(int level, uint64_t salt);

static NOINLINE uint64_t Bottom(uint64_t salt) {
  char* p = malloc(64 + salt % 64);
  p[0] = (char)salt;
  uint64_t r = (uint64_t)(uintptr_t)p;
  Retain(p);
  return r;
}

static inline __attribute__((always_inline)) uint64_t Next(int level, uint64_t salt) {
  if (level <= 0) return Bottom(salt);
  switch ((salt >> (level % 32)) % 3) {
    case 0: return RecurseA(level - 1, salt * 3 + 1);
    case 1: return RecurseB(level - 1, salt ^ 0x9e37);
    default: return RecurseC(level - 1, salt + 7);
  }
}

static NOINLINE uint64_t RecurseA(int level, uint64_t salt) {
  uint64_t r = Next(level, salt);
  KEEP(r);
  return r + 1;
}

static NOINLINE uint64_t RecurseB(int level, uint64_t salt) {
  volatile char buffer[300];
  buffer[0] = (char)level;
  uint64_t a = salt * 5, b = salt ^ 0xff, c = salt + (uint64_t)level;
  KEEP(a);
  KEEP(b);
  KEEP(c);
  uint64_t r = Next(level, salt);
  KEEP(r);
  return r + a + b + c + (uint64_t)buffer[0];
}

static NOINLINE uint64_t RecurseC(int level, uint64_t salt) {
  size_t n = 8 + salt % 100;
  volatile char buffer[n];  // a variable-length array: the frame keeps a frame pointer
  buffer[0] = (char)level;
  uint64_t r = Next(level, salt);
  KEEP(r);
  return r + (uint64_t)buffer[0] + n;
}

static NOINLINE void Work(int rounds, int seed) {
  for (int round = 0; round < rounds; ++round) {
    DirectAllocations(round + seed);
    Strings(round + seed);
    SortWithCallback(round + seed);
    uint64_t r = RecurseA(kRecursionDepth + round % 5, (uint64_t)(round * 2654435761u + seed));
    KEEP(r);
  }
}

static int g_rounds;

static void* ThreadMain(void* arg) {
  Work(g_rounds, (int)(intptr_t)arg);
  return NULL;
}

int main(int argc, char** argv) {
  g_rounds = argc > 1 ? atoi(argv[1]) : 40;
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    pthread_create(&threads[i], NULL, ThreadMain, (void*)(intptr_t)(1000 * (i + 1)));
  }
  Work(g_rounds, 0);
  for (int i = 0; i < kThreads; ++i) pthread_join(threads[i], NULL);
  return 0;
}

#include "bench/corpus.h"

#include <stdlib.h>
#include <string.h>

// Keeps a value live in a register after a call, so the call cannot be a tail call.
#define KEEP(x) __asm__ volatile("" : "+r"(x))
#define NOINLINE __attribute__((noinline))

namespace droidheap_bench {
namespace {

struct Walk {
  uint64_t state;
  CaptureFn capture;
  void* arg;
  bool used_qsort;
};

uint64_t Next(Walk* w) {
  w->state ^= w->state << 13;
  w->state ^= w->state >> 7;
  w->state ^= w->state << 17;
  return w->state;
}

// Chooses the next step; inlined into every step, so that each level of the walk is one frame.
inline __attribute__((always_inline)) uint64_t Descend(Walk* w, int level);

NOINLINE uint64_t StepPlain(Walk* w, int level) {
  uint64_t r = Descend(w, level - 1);
  KEEP(r);
  return r + static_cast<uint64_t>(level);
}

// Several values live across the call: the prologue saves callee-saved registers.
NOINLINE uint64_t StepSaves(Walk* w, int level) {
  uint64_t a = Next(w), b = a * 3 + 1, c = a ^ 0x5555, d = b + c, e = a * a;
  KEEP(a);
  KEEP(b);
  KEEP(c);
  KEEP(d);
  KEEP(e);
  uint64_t r = Descend(w, level - 1);
  KEEP(r);
  return r + (a ^ b) + (c ^ d) + e;
}

// A fixed local array: a large constant stack adjustment.
NOINLINE uint64_t StepArray(Walk* w, int level) {
  volatile char buffer[512];
  buffer[0] = static_cast<char>(level);
  buffer[511] = static_cast<char>(Next(w));
  uint64_t r = Descend(w, level - 1);
  KEEP(r);
  return r + static_cast<uint64_t>(buffer[0] + buffer[511]);
}

// A variable-length array: the compiler keeps a frame pointer here, CFA = fp + offset.
NOINLINE uint64_t StepVla(Walk* w, int level) {
  size_t n = 16 + Next(w) % 200;
  volatile char buffer[n];
  buffer[0] = static_cast<char>(level);
  buffer[n - 1] = 1;
  uint64_t r = Descend(w, level - 1);
  KEEP(r);
  return r + static_cast<uint64_t>(buffer[0] + buffer[n - 1]);
}

// Descends from inside qsort's comparison callback (the walk continues on the first comparison).
Walk* g_qsort_walk = nullptr;
int g_qsort_level = 0;
uint64_t g_qsort_result = 0;

NOINLINE int Compare(const void* a, const void* b) {
  if (g_qsort_walk != nullptr) {
    Walk* w = g_qsort_walk;
    g_qsort_walk = nullptr;
    g_qsort_result = Descend(w, g_qsort_level - 1);
  }
  int x, y;
  memcpy(&x, a, sizeof(x));
  memcpy(&y, b, sizeof(y));
  return (x > y) - (x < y);
}

NOINLINE uint64_t StepQsort(Walk* w, int level) {
  int values[16];
  for (int i = 0; i < 16; ++i) values[i] = static_cast<int>(Next(w) % 1000);
  w->used_qsort = true;
  g_qsort_walk = w;
  g_qsort_level = level;
  qsort(values, 16, sizeof(int), Compare);
  uint64_t r = g_qsort_result;
  KEEP(r);
  return r + static_cast<uint64_t>(values[0]);
}

NOINLINE uint64_t StepPlain(Walk* w, int level);
NOINLINE uint64_t StepSaves(Walk* w, int level);
NOINLINE uint64_t StepArray(Walk* w, int level);
NOINLINE uint64_t StepVla(Walk* w, int level);
NOINLINE uint64_t StepQsort(Walk* w, int level);

inline __attribute__((always_inline)) uint64_t Descend(Walk* w, int level) {
  if (level <= 0) {
    w->capture(w->arg);
    return 1;
  }
  uint64_t r;
  switch (Next(w) % 9) {
    case 0:
    case 1:
      r = StepPlain(w, level);
      break;
    case 2:
    case 3:
      r = StepSaves(w, level);
      break;
    case 4:
    case 5:
      r = StepArray(w, level);
      break;
    case 6:
    case 7:
      r = StepVla(w, level);
      break;
    default:
      r = (w->used_qsort || level < 2) ? StepPlain(w, level) : StepQsort(w, level);
      break;
  }
  KEEP(r);
  return r ^ static_cast<uint64_t>(level);
}

}  // namespace

uint64_t RunCorpusPath(uint64_t seed, int depth, CaptureFn capture, void* arg) {
  Walk w{seed * 0x9E3779B97F4A7C15ull + 1, capture, arg, false};
  uint64_t r = Descend(&w, depth);
  KEEP(r);
  return r;
}

}  // namespace droidheap_bench

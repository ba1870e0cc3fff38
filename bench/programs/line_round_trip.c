// Prints `round_trip_ns=N`: how long one cache line takes to go from one core to another and back,
// two threads on the first two CPUs this process may use handing a counter to each other. What a
// profiled thread pays when it writes a line the daemon last read on its own core (the ring's
// records, docs/benchmarks.md, 2026-12-01): the same code's cost per sample moves with it, from
// one machine to the next and from one day to the next on the same virtual machine
// (bench/overhead.py prints it beside its figures). Exits 2 with fewer than two CPUs.
//
//     line_round_trip
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

enum { kRoundTrips = 1000000 };

// Alone on its line: nothing else of the program moves with it.
static _Alignas(64) atomic_long g_turn;
static int g_cpus[2];  // the first two this process may run on

static cpu_set_t just(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return set;
}

// Odd turns are the other thread's: it answers each with the next even one.
static void* answer(void* unused) {
  (void)unused;
  for (long turn = 1; turn < 2L * kRoundTrips; turn += 2) {
    while (atomic_load_explicit(&g_turn, memory_order_acquire) != turn) {
    }
    atomic_store_explicit(&g_turn, turn + 1, memory_order_release);
  }
  return NULL;
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(void) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    perror("line_round_trip: sched_getaffinity");
    return 1;
  }
  int found = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && found < 2; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) g_cpus[found++] = cpu;
  }
  if (found < 2) {
    fprintf(stderr, "line_round_trip: fewer than two CPUs to run on\n");
    return 2;
  }
  const cpu_set_t first = just(g_cpus[0]), second = just(g_cpus[1]);
  pthread_attr_t attr;
  pthread_t other;
  if (pthread_setaffinity_np(pthread_self(), sizeof(first), &first) != 0 ||
      pthread_attr_init(&attr) != 0 ||
      pthread_attr_setaffinity_np(&attr, sizeof(second), &second) != 0 ||
      pthread_create(&other, &attr, answer, NULL) != 0) {
    fprintf(stderr, "line_round_trip: cannot run a thread on each of CPUs %d and %d\n", g_cpus[0],
            g_cpus[1]);
    return 1;
  }
  const long long start = now_ns();
  for (long turn = 0; turn < 2L * kRoundTrips; turn += 2) {
    atomic_store_explicit(&g_turn, turn + 1, memory_order_release);
    while (atomic_load_explicit(&g_turn, memory_order_acquire) != turn + 2) {
    }
  }
  const long long elapsed = now_ns() - start;
  pthread_join(other, NULL);
  printf("round_trip_ns=%lld\n", elapsed / kRoundTrips);
  return 0;
}

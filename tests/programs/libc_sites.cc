// Allocation sites reached through code without frame pointers: libc (strdup, qsort callbacks),
// libstdc++ (operator new, std::string, std::vector growth) and a deep recursion. Built with
// -O2 -fomit-frame-pointer by the tests, as distributions and Android build everything: only a
// CFI unwinder attributes these bytes to the site_* function that caused them.
//
//   libc_sites [--linger-freeing MS]   totals per site in tests/e2e/expected_sites.py
//
// With --linger-freeing it then goes on allocating and freeing 16 bytes every millisecond for MS
// milliseconds (as alloc_sites.c: Android 10's heapprofd books nothing past a client's last free).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#define NOINLINE __attribute__((noinline))

static void* volatile g_sink;

// Every site ends with a store through g_sink, so that its call is never a tail call (which would
// take the site's frame off the stack).
extern "C" {

NOINLINE void site_strdup(void) {  // 1000 x 301 B, kept
  static char text[301];
  memset(text, 'x', 300);
  for (int i = 0; i < 1000; i++) g_sink = strdup(text);
}

NOINLINE void site_operator_new(void) {  // 1000 x 512 B, kept
  for (int i = 0; i < 1000; i++) g_sink = new char[512];
}

NOINLINE void site_std_string(void) {  // 1000 x 201 B (200 chars + NUL), kept
  for (int i = 0; i < 1000; i++) g_sink = new std::string(200, 'y');  // + the string object
}

NOINLINE void site_vector_growth(void) {  // 1 vector grown to 1 << 16 ints: 2^0..2^16 ints
  auto* v = new std::vector<int>;
  for (int i = 0; i < (1 << 16); i++) v->push_back(i);
  g_sink = v;
}

static int compare_and_allocate(const void* a, const void* b) {
  g_sink = malloc(64);  // one per comparison; freed right away below
  free(g_sink);
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

NOINLINE void site_qsort_callback(void) {
  int values[64];
  for (int i = 0; i < 64; i++) values[i] = (i * 37) % 64;
  qsort(values, 64, sizeof(int), compare_and_allocate);
  g_sink = values;
}

NOINLINE int site_deep_recursion(int depth) {  // 100 x 4096 B at depth 80, kept
  if (depth == 0) {
    for (int i = 0; i < 100; i++) g_sink = malloc(4096);
    return 0;
  }
  volatile int keep = depth;
  return site_deep_recursion(depth - 1) + keep;
}

}  // extern "C"

int main(int argc, char** argv) {
  int linger_freeing_ms = 0;
  if (argc == 3 && strcmp(argv[1], "--linger-freeing") == 0) {
    linger_freeing_ms = atoi(argv[2]);
  } else if (argc != 1) {
    fprintf(stderr, "usage: %s [--linger-freeing MS]\n", argv[0]);
    return 2;
  }
  site_strdup();
  site_operator_new();
  site_std_string();
  site_vector_growth();
  site_qsort_callback();
  site_deep_recursion(80);
  printf("done\n");
  fflush(stdout);
  for (int i = 0; i < linger_freeing_ms; i++) {
    g_sink = malloc(16);
    free(g_sink);
    usleep(1000);
  }
  return 0;
}

// Allocation sites behind inlined calls, for the symbolizer's inline frames: a chain of
// always-inline functions in this file and the inlining of libstdc++'s std::vector growth.
// Built with -O2 -g by the tests, which compare every frame with llvm-symbolizer's.
#include <stdlib.h>

#include <vector>

static void* volatile g_sink;

static inline __attribute__((always_inline)) void* inner_alloc(size_t n) {
  return malloc(n);  // INNER_MALLOC
}

static inline __attribute__((always_inline)) void* middle_alloc(size_t n) {
  void* p = inner_alloc(n * 2);  // MIDDLE_CALL
  return p;
}

// A static function: only .symtab (or MiniDebugInfo) names it.
static __attribute__((noinline)) void outer_alloc(int count) {
  for (int i = 0; i < count; i++) g_sink = middle_alloc(100);  // OUTER_CALL
}

__attribute__((noinline)) void grow_vector(int count) {
  auto* v = new std::vector<long>;
  for (int i = 0; i < count; i++) v->push_back(i);  // PUSH_BACK
  g_sink = v;
}

int main(int argc, char** argv) {
  int count = argc > 1 ? atoi(argv[1]) : 100;
  outer_alloc(count);
  grow_vector(count * 100);
  return 0;
}

// A heap with one peak: peak_phase holds PEAK_BLOCKS blocks of PEAK_SIZE bytes at once, then frees
// them; after_peak then keeps AFTER_BLOCKS smaller ones to the end. At the largest the sampled heap
// holds peak_phase's blocks and none of after_peak's (tests/e2e/test_dumps.py).
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
enum { PEAK_BLOCKS = 64, PEAK_SIZE = 10000, AFTER_BLOCKS = 16, AFTER_SIZE = 1000 };

static void* volatile g_keep[PEAK_BLOCKS];

NOINLINE void peak_phase(void) {
  for (int i = 0; i < PEAK_BLOCKS; i++) g_keep[i] = malloc(PEAK_SIZE);
  for (int i = 0; i < PEAK_BLOCKS; i++) free(g_keep[i]);
}

NOINLINE void after_peak(void) {
  for (int i = 0; i < AFTER_BLOCKS; i++) g_keep[i] = malloc(AFTER_SIZE);
}

int main(void) {
  peak_phase();
  after_peak();
  printf("done\n");
  return 0;
}

// A realloc that fails leaves its block where it was, still the program's: 64 blocks of 1000 B
// from site_kept, each asked to grow to a size no allocator gives, then half of them freed
// (tests/e2e/test_profile.py). At -i 1 the profile must show site_kept with 64 allocations, 32000 B
// in use: neither a failed realloc's free nor a later real one lost.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

enum { BLOCKS = 64, SIZE = 1000 };

static void* volatile g_blocks[BLOCKS];

NOINLINE void* site_kept(void) { return malloc(SIZE); }

int main(void) {
  int failed = 0;
  for (int i = 0; i < BLOCKS; i++) g_blocks[i] = site_kept();
  for (int i = 0; i < BLOCKS; i++) {
    void* grown = realloc(g_blocks[i], SIZE_MAX / 2);
    if (grown == NULL && errno == ENOMEM) {
      failed++;
    } else {
      g_blocks[i] = grown;
    }
  }
  for (int i = 0; i < BLOCKS; i += 2) free(g_blocks[i]);
  printf("failed=%d\n", failed);
  return 0;
}

/* A program that exits right after allocating: what its last dump says of it must be of its exit.
 *
 *   exit_at_once [--abrupt STATUS | --signal N | --freed BLOCKS]
 *
 * Allocates 20 blocks of 1 MiB, every page written (20 MiB resident), keeps them and returns from
 * main at once; with --abrupt it calls _exit(STATUS) instead, which runs no exit path (the
 * profiler's client cannot say goodbye, as after a crash); with --signal it is killed by signal N.
 * With --freed it first allocates BLOCKS small blocks (16 to 64 B) and frees them in a shuffled
 * order, as a program that frees its data structures at its end leaves its heap: glibc's mallinfo
 * then walks BLOCKS free blocks.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCKS 20
#define BLOCK_SIZE (1 << 20)

static void* volatile g_blocks[BLOCKS];

static void AllocateAndFree(long count) {
  void** blocks = malloc(count * sizeof(void*));
  if (blocks == NULL) return;
  unsigned seed = 7;
  for (long i = 0; i < count; i++) blocks[i] = malloc(16 + 16 * (rand_r(&seed) % 4));
  for (long i = count - 1; i > 0; i--) {
    long j = rand_r(&seed) % (i + 1);
    void* held = blocks[i];
    blocks[i] = blocks[j];
    blocks[j] = held;
  }
  for (long i = 0; i < count; i++) free(blocks[i]);
  free(blocks);
}

int main(int argc, char** argv) {
  for (int i = 0; i < BLOCKS; i++) {
    g_blocks[i] = malloc(BLOCK_SIZE);
    if (g_blocks[i] != NULL) memset(g_blocks[i], 1, BLOCK_SIZE);
  }
  // Last: a large allocation would first merge the freed blocks (glibc's fast bins).
  if (argc == 3 && strcmp(argv[1], "--freed") == 0) AllocateAndFree(atol(argv[2]));
  if (argc == 3 && strcmp(argv[1], "--abrupt") == 0) _exit(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "--signal") == 0) kill(getpid(), atoi(argv[2]));
  return 0;
}

/* A program that exits right after allocating: what its last dump says of it must be of its exit.
 *
 *   exit_at_once [--abrupt STATUS | --signal N]
 *
 * Allocates 20 blocks of 1 MiB, every page written (20 MiB resident), keeps them and returns from
 * main at once; with --abrupt it calls _exit(STATUS) instead, which runs no exit path (the
 * profiler's client cannot say goodbye, as after a crash); with --signal it is killed by signal N.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCKS 20
#define BLOCK_SIZE (1 << 20)

static void* volatile g_blocks[BLOCKS];

int main(int argc, char** argv) {
  for (int i = 0; i < BLOCKS; i++) {
    g_blocks[i] = malloc(BLOCK_SIZE);
    if (g_blocks[i] != NULL) memset(g_blocks[i], 1, BLOCK_SIZE);
  }
  if (argc == 3 && strcmp(argv[1], "--abrupt") == 0) _exit(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "--signal") == 0) kill(getpid(), atoi(argv[2]));
  return 0;
}

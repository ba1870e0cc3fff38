/* Allocates inside a signal handler, then exits at once: the stack runs through the signal
 * frame (glibc's __restore_rt, or the kernel's or qemu's trampoline), and the process is gone
 * long before the daemon has unwound its records. Expected: 10 x 777 B in site_signal_handler,
 * with site_raise and main below the signal frame. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static void* volatile g_sink;

NOINLINE void site_signal_handler(int sig) {
  (void)sig;
  for (int i = 0; i < 10; i++) g_sink = malloc(777);
}

NOINLINE void site_raise(void) {
  raise(SIGUSR2);
  g_sink = 0; /* no tail call */
}

int main(void) {
  signal(SIGUSR2, site_signal_handler);
  site_raise();
  printf("done\n");
  return 0;
}

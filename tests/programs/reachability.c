// Blocks kept and dropped in each way a conservative sweep must tell apart, one site each, as
// LeakSanitizer sees them at exit (PITFALLS, "Reachability"):
//   kept:    site_global_list (a list rooted in a global), site_interior (only a pointer 8 bytes
//            in), site_container (a heap-only container and its 16 blocks), site_thread_stack
//            (held only on a blocked thread's stack), site_tls (held only in TLS)
//   dropped: site_dropped_list (50 nodes, head dropped), site_cycles (10 two-block cycles),
//            site_dropped (20 blocks dropped at once)
// Unreachable at exit: 90 blocks, 4000 bytes (50 x 48 + 20 x 48 + 20 x 32). Every kept block
// has another size (64, 24, 128, 100, 56): what a sweep calls unreachable must add up from 48s and
// 32s.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

struct node {
  struct node* next;
  char payload[40];
};

struct kept_node {
  struct kept_node* next;
  char payload[56];
};

// Volatile: the compiler must store what nothing in the program reads.
static struct kept_node* volatile g_list;
static char* volatile g_interior;
static void** volatile g_container;
// Aligned to 64: bionic on arm64 (32 on arm) refuses an executable whose TLS segment is aligned
// to less (the NDK's startup files add such a variable; a plain build does not).
static __thread void* volatile t_kept __attribute__((aligned(64)));
static int g_pipe[2];
static volatile int g_holding;

NOINLINE struct kept_node* site_global_list(void) {
  struct kept_node* head = 0;
  for (int i = 0; i < 50; i++) {
    struct kept_node* n = malloc(sizeof(struct kept_node));
    n->next = head;
    head = n;
  }
  return head;
}

// Each dropped pointer passes through a volatile local once: the compiler may not leave out an
// allocation whose pointer is written only to memory nothing reads. The links are written through
// volatile lvalues too: a block that nothing else reads does not escape, and gcc -O1 drops plain
// stores into it (the list and the cycles would be blocks that point at nothing).
static void link_to(struct node* from, struct node* to) {
  *(struct node* volatile*)&from->next = to;
}

NOINLINE void site_dropped_list(void) {
  struct node* volatile head = 0;
  for (int i = 0; i < 50; i++) {
    struct node* n = malloc(sizeof(struct node));
    link_to(n, head);
    head = n;
  }
}

NOINLINE void site_cycles(void) {
  for (int i = 0; i < 10; i++) {
    struct node* volatile a = malloc(sizeof(struct node));
    struct node* volatile b = malloc(sizeof(struct node));
    link_to(a, b);
    link_to(b, a);
  }
}

NOINLINE void site_dropped(void) {
  for (int i = 0; i < 20; i++) {
    void* volatile p = malloc(32);
    (void)p;
  }
}

NOINLINE char* site_interior(void) { return (char*)malloc(64) + 8; }

NOINLINE void** site_container(void) {
  void** container = calloc(16, sizeof(void*));
  for (int i = 0; i < 16; i++) container[i] = malloc(24);
  return container;
}

NOINLINE void* site_thread_stack(void) { return malloc(100); }

NOINLINE void* site_tls(void) { return malloc(56); }

static void* hold_on_stack(void* arg) {
  (void)arg;
  void* volatile kept = site_thread_stack();
  g_holding = 1;
  char byte;
  while (read(g_pipe[0], &byte, 1) != 0) {
  }
  return kept;
}

// Overwrites the frames below: stale copies of dropped pointers would keep their blocks.
NOINLINE void scrub_stack(void) {
  volatile char buffer[64 * 1024];
  for (size_t i = 0; i < sizeof(buffer); i++) buffer[i] = 0;
}

int main(void) {
  if (pipe(g_pipe) != 0) return 1;
  pthread_t holder;
  if (pthread_create(&holder, 0, hold_on_stack, 0) != 0) return 1;
  while (!g_holding) usleep(1000);
  g_list = site_global_list();
  site_dropped_list();
  site_cycles();
  site_dropped();
  g_interior = site_interior();
  g_container = site_container();
  t_kept = site_tls();
  scrub_stack();
  return 0;  // exit() with the holder still blocked: its stack is still there
}

/* A profiled process that turns on the daemon through its own shared buffer, and its honest
 * neighbour, for tests/e2e/test_hostile_client.py (issue 41):
 *
 *   ring_hog hog SECONDS [--close] [--spread]
 *                                    once its client is connected (its own client writes nothing
 *                                    more: the hog allocates nothing) and for SECONDS keeps the
 *                                    buffer full of committed allocation records that carry no
 *                                    stack copy, their registers pointing at a 300-frame
 *                                    frame-pointer chain in its own memory: every record costs an
 *                                    unwind through /proc/PID/mem, and the buffer never empties.
 *                                    With --close it also shuts its socket to the daemon down once
 *                                    the buffer is full, as a process that is going away does;
 *                                    with --spread each frame record lies on a page of its own
 *                                    (the most an unwind can be made to read), else they are
 *                                    packed in two pages.
 *   ring_hog honest SECONDS          allocates and frees 64 bytes every millisecond for SECONDS,
 *                                    then prints the longest any one malloc took.
 *
 * Both print "waiting pid=N" once started ("attacking pid=N" for the hog once it holds the
 * buffer). x86_64 and arm64-v8a: the registers are laid out as their clients capture them
 * (ndk_client/unwinder/registers.h). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
/* rbx rbp rsp r12 r13 r14 r15 rip */
enum { REGISTERS = 8, FP = 1, SP = 2, PC = 7 };
#elif defined(__aarch64__)
/* x19..x28, x29 (fp), x30 (lr), sp, pc */
enum { REGISTERS = 14, FP = 10, SP = 12, PC = 13 };
#else
enum { REGISTERS = 0, FP = 0, SP = 0, PC = 0 };
#endif

enum { FRAMES = 300, RECORD_ALLOC = 1 };

/* ring_buffer.h's metadata offsets. */
enum { META_DATA_SIZE = 8, META_COMMIT_KEY = 16, META_WRITE_POS = 72, META_READ_POS = 128 };
/* ring_buffer.h, version 3: commit tag, size, type */
enum { HEADER_SIZE = 16 };

struct alloc_record {  /* wire_protocol.h's AllocRecord, then the registers */
  uint64_t sequence, address, sample_size, alloc_size, stack_pointer;
  uint32_t tid, stack_size;
  uint64_t regs[REGISTERS > 0 ? REGISTERS : 1];
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The start of the ring buffer's mapping (its metadata page), 0 while there is none. */
static uintptr_t find_ring(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return 0;
  char line[512];
  uintptr_t found = 0;
  while (!found && fgets(line, sizeof(line), maps)) {
    uintptr_t start, end;
    unsigned long long offset;
    if (strstr(line, "droidheap_ring") &&
        sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %llx", &start, &end, &offset) == 3 &&
        offset == 0) {
      found = start;
    }
  }
  fclose(maps);
  return found;
}

static int hog(int seconds, int close_socket, int spread) {
  if (REGISTERS == 0) {
    fprintf(stderr, "ring_hog: no register layout for this ABI\n");
    return 77;
  }
  printf("waiting pid=%d\n", (int)getpid());
  fflush(stdout);
  uintptr_t base = 0;
  for (uint64_t give_up = now_ms() + 30000; !(base = find_ring()); usleep(10000)) {
    if (now_ms() > give_up) {
      fprintf(stderr, "ring_hog: no ring buffer mapped\n");
      return 1;
    }
  }
  /* The chain: frame i's record (caller's frame pointer, return address) `stride` words after
   * frame i-1's, each return address inside the chain's own anonymous mapping, where no unwind
   * table applies. */
  const size_t stride = spread ? (4096 + 16) / sizeof(uint64_t) : 2;
  size_t chain_bytes = (FRAMES + 1) * stride * sizeof(uint64_t) + 4096;
  uint64_t* chain = mmap(NULL, chain_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
  if (chain == MAP_FAILED) return 1;
  const uint64_t chain_at = (uint64_t)(uintptr_t)chain;
  const uint64_t pc = chain_at + chain_bytes - 64;
  for (int i = 0; i < FRAMES; i++) {
    chain[stride * i] = i + 1 < FRAMES ? (uint64_t)(uintptr_t)&chain[stride * (i + 1)] : 0;
    chain[stride * i + 1] = pc + 8;
  }

  uint8_t* meta = (uint8_t*)base;
  const uint64_t data_size = *(volatile uint64_t*)(meta + META_DATA_SIZE);
  uint8_t* data = meta + sysconf(_SC_PAGESIZE);
  const uint64_t commit_key = *(volatile uint64_t*)(meta + META_COMMIT_KEY);
  uint64_t* write_pos = (uint64_t*)(meta + META_WRITE_POS);
  uint64_t* read_pos = (uint64_t*)(meta + META_READ_POS);
  printf("attacking pid=%d\n", (int)getpid());
  fflush(stdout);

  struct alloc_record record;
  memset(&record, 0, sizeof(record));
  record.address = 0x100000;  /* always the same block: the daemon's bookkeeping stays small */
  record.sample_size = record.alloc_size = 64;
  record.stack_pointer = chain_at;
  record.tid = (uint32_t)getpid();
  record.regs[SP] = chain_at;
  record.regs[FP] = chain_at;
  record.regs[PC] = pc;
  const uint32_t size = (uint32_t)((HEADER_SIZE + sizeof(record) + 7) & ~(size_t)7);
  uint64_t written = 0;
  for (uint64_t end = now_ms() + (uint64_t)seconds * 1000; now_ms() < end;) {
    uint64_t w = __atomic_load_n(write_pos, __ATOMIC_RELAXED);
    const uint64_t r = __atomic_load_n(read_pos, __ATOMIC_ACQUIRE);
    if (w - r + size > data_size) {
      sched_yield();
      continue;
    }
    /* One buffer ahead of the reader: records up to the end of its room, committed at once. */
    while (w - r + size <= data_size) {
      uint8_t* header = data + (w & (data_size - 1));
      record.sequence = w;
      memcpy(header + 8, &size, 4);
      memcpy(header + 12, &(uint32_t){RECORD_ALLOC}, 4);
      memcpy(header + HEADER_SIZE, &record, sizeof(record));
      __atomic_store_n((uint64_t*)header, w ^ commit_key, __ATOMIC_RELEASE);
      w += size;
      written++;
    }
    __atomic_store_n(write_pos, w, __ATOMIC_RELEASE);
    if (close_socket) {  /* once the buffer is full: the daemon drains it as the process's last */
      close_socket = 0;
      for (int fd = 3; fd < 1024; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) shutdown(fd, SHUT_RDWR);
      }
    }
  }
  printf("hog done records=%" PRIu64 "\n", written);
  fflush(stdout);
  return 0;
}

static int honest(int seconds) {
  printf("waiting pid=%d\n", (int)getpid());
  fflush(stdout);
  uint64_t longest_us = 0;
  for (uint64_t end = now_ms() + (uint64_t)seconds * 1000; now_ms() < end;) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    void* volatile p = malloc(64);
    clock_gettime(CLOCK_MONOTONIC, &b);
    free(p);
    uint64_t us = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000 + (uint64_t)(b.tv_nsec / 1000) -
                  (uint64_t)(a.tv_nsec / 1000);
    if (us > longest_us) longest_us = us;
    usleep(1000);
  }
  printf("longest malloc us=%" PRIu64 "\n", longest_us);
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[1], "hog") == 0) {
    int close_socket = 0, spread = 0;
    for (int i = 3; i < argc; i++) {
      close_socket |= strcmp(argv[i], "--close") == 0;
      spread |= strcmp(argv[i], "--spread") == 0;
    }
    return hog(atoi(argv[2]), close_socket, spread);
  }
  if (argc == 3 && strcmp(argv[1], "honest") == 0) return honest(atoi(argv[2]));
  fprintf(stderr, "usage: %s hog SECONDS [--close] [--spread] | honest SECONDS\n", argv[0]);
  return 2;
}

// The snapshot mechanism end to end, in two processes: a program that keeps and drops blocks in
// each way a conservative sweep must tell apart runs the client's snapshot thread
// (client/snapshot_thread.h); this test, as the daemon, holds its threads, has it fork a copy,
// lets it go, and sweeps the copy (process_snapshot.h, root_ranges.h, heap_sweep.h).
//
// Under qemu-user there is no ptrace: the copy is taken while the program runs and every stack is
// a root from its bottom, so only "nothing reachable is called unreachable" is checked there.
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "client/snapshot_thread.h"
#include "common/platform.h"
#include "reachability/heap_sweep.h"
#include "reachability/process_snapshot.h"
#include "reachability/root_ranges.h"
#include "tests/test_util.h"

using namespace droidheap;

namespace {

struct Expected {
  uint64_t address;
  uint64_t size;
  int reachable;
  const char* how;
};

struct Shared {
  std::atomic<int> ready;
  std::atomic<uint64_t> mallocs;  // the program's main thread allocates on and on
  int count;
  Expected blocks[1024];
};

Shared* g_shared;

struct Node {
  Node* next;
  char payload[40];
};

// The program's roots: volatile, or the compiler drops stores that nothing reads.
Node* volatile g_list;             // a list kept whole through its head
char* volatile g_interior;         // points 8 bytes into its block
void** volatile g_container;       // a heap-only container of blocks
DROIDHEAP_EXECUTABLE_TLS void* volatile t_kept;  // TLS
volatile int g_pipe_read = -1;
std::atomic<bool> g_holder_noted{false};

void Note(void* block, size_t size, bool reachable, const char* how) {
  Expected& e = g_shared->blocks[g_shared->count++];
  e = {reinterpret_cast<uintptr_t>(block), size, reachable ? 1 : 0, how};
}

Node* MakeList(int count, bool reachable, const char* how) {
  Node* head = nullptr;
  for (int i = 0; i < count; ++i) {
    Node* n = static_cast<Node*>(malloc(sizeof(Node)));
    n->next = head;
    head = n;
    Note(n, sizeof(Node), reachable, how);
  }
  return head;
}

// Stale copies of dropped pointers on the stack would keep blocks: overwrite the frames below.
__attribute__((noinline)) void ScrubStack() {
  volatile char buffer[64 * 1024];
  for (size_t i = 0; i < sizeof(buffer); ++i) buffer[i] = 0;
}

void* HoldOnStack(void*) {
  void* volatile kept = malloc(100);
  Note(kept, 100, true, "on another thread's stack");
  g_holder_noted.store(true);
  char byte;
  // Blocks in read() for ever: the pointer stays on this stack only.
  while (read(g_pipe_read, &byte, 1) != 0) {
  }
  return kept;
}

__attribute__((noinline)) void BuildHeap() {
  g_list = MakeList(50, true, "a list rooted in a global");
  MakeList(50, false, "a dropped list");
  Node* a = static_cast<Node*>(malloc(sizeof(Node)));
  Node* b = static_cast<Node*>(malloc(sizeof(Node)));
  a->next = b;
  b->next = a;
  Note(a, sizeof(Node), false, "a dropped cycle");
  Note(b, sizeof(Node), false, "a dropped cycle");
  g_interior = static_cast<char*>(malloc(64)) + 8;
  Note(g_interior - 8, 64, true, "an interior pointer");
  g_container = static_cast<void**>(calloc(16, sizeof(void*)));
  Note(g_container, 16 * sizeof(void*), true, "a container in a global");
  for (int i = 0; i < 16; ++i) {
    g_container[i] = malloc(24);
    Note(g_container[i], 24, true, "in a heap-only container");
  }
  t_kept = malloc(48);
  Note(t_kept, 48, true, "in TLS");
  for (int i = 0; i < 20; ++i) Note(malloc(32), 32, false, "dropped at once");
}

#if defined(__BIONIC__)
// bionic exports these; its public headers do not declare them.
extern "C" int malloc_iterate(uintptr_t base, size_t size,
                              void (*callback)(uintptr_t, size_t, void*), void* arg);
extern "C" void malloc_disable();
extern "C" void malloc_enable();
#endif

// The allocator the snapshot thread lists blocks with: bionic's own (nullptr on glibc, which
// cannot list them).
const MallocDispatch* Allocator() {
#if defined(__BIONIC__)
  static MallocDispatch allocator = [] {
    MallocDispatch d{};
    d.malloc_iterate = malloc_iterate;
    d.malloc_disable = malloc_disable;
    d.malloc_enable = malloc_enable;
    return d;
  }();
  return &allocator;
#else
  return nullptr;
#endif
}

[[noreturn]] void RunProgram(int channel) {
  int pipe_fds[2];
  CHECK(pipe(pipe_fds) == 0);
  g_pipe_read = pipe_fds[0];
  BuildHeap();
  pthread_t holder;
  CHECK(pthread_create(&holder, nullptr, HoldOnStack, nullptr) == 0);
  ScrubStack();
  const SnapshotRange shared{reinterpret_cast<uintptr_t>(g_shared),
                             reinterpret_cast<uintptr_t>(g_shared) + sizeof(Shared)};
  CHECK(StartSnapshotThread(channel, &shared, 1, Allocator()));
  while (!g_holder_noted.load()) usleep(1000);
  g_shared->ready.store(1);
  for (;;) {
    free(malloc(64));
#if defined(__BIONIC__)
    // What takes the allocator's locks (a thread's cache serves a malloc without them, held or
    // not): its statistics.
    (void)mallinfo();
#endif
    ++g_shared->mallocs;
    usleep(100);
  }
}

// How many milliseconds pass before the program's main thread allocates again; -1 when it does
// not within a second.
int MsUntilItAllocates() {
  const uint64_t before = g_shared->mallocs.load();
  for (int ms = 0; ms < 1000; ++ms, usleep(1000)) {
    if (g_shared->mallocs.load() != before) return ms;
  }
  return -1;
}

bool Allocates() { return MsUntilItAllocates() >= 0; }

// Has the snapshot thread hold the allocator, as SnapshotChannel does before a listing fork,
// and asks nothing more: the program's calls that take the allocator's locks wait, and go on
// kAllocatorHoldMs later.
void TestAHeldAllocatorIsLetGo(int channel) {
  const SnapshotRequest hold{kSnapshotMagic, kSnapshotVersion, sizeof(SnapshotRequest),
                             kSnapshotHoldAllocator, 999};
  CHECK(send(channel, &hold, sizeof(hold), 0) == sizeof(hold));
  SnapshotReady answer{};
  CHECK(recv(channel, &answer, sizeof(answer), 0) == sizeof(answer));
  CHECK(answer.id == 999 && answer.status == kSnapshotAllocatorHeld);
  const uint64_t held_at = g_shared->mallocs.load();
  usleep(kAllocatorHoldMs * 1000 / 2);
  CHECK(g_shared->mallocs.load() <= held_at + 1);  // one malloc may have been past the lock
  CHECK(Allocates());
  printf("a held allocator is let go after %d ms\n", kAllocatorHoldMs);
}

// qemu-user emulates no ptrace (natively, asking to interrupt a process that is no tracee of
// ours is ESRCH).
bool UnderQemu() {
  return ptrace(PTRACE_INTERRUPT, getpid(), nullptr, nullptr) != 0 && errno == ENOSYS;
}

}  // namespace

int main() {
  g_shared = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  CHECK(g_shared != MAP_FAILED);
  int channel[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) == 0);
  const pid_t program = fork();
  CHECK(program >= 0);
  if (program == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed check leaves no program behind
    close(channel[0]);
    RunProgram(channel[1]);
  }
  close(channel[1]);
  for (int i = 0; i < 10000 && g_shared->ready.load() == 0; ++i) usleep(1000);
  CHECK(g_shared->ready.load() == 1);

  size_t threads_before_snapshot = 0;
  if (DIR* tasks = opendir(("/proc/" + std::to_string(program) + "/task").c_str())) {
    while (dirent* entry = readdir(tasks)) threads_before_snapshot += entry->d_name[0] != '.';
    closedir(tasks);
  }
  SnapshotChannel snapshots(channel[0]);
  std::string error;
  bool called = false;
  std::unique_ptr<ProcessSnapshot> snapshot =
      snapshots.Take(program, kNativeLayout, [&called] { called = true; },
                     /*list_blocks=*/true, /*max_blocks=*/1 << 20, &error);
  if (snapshot == nullptr && UnderQemu() &&
      error.find("at its own addresses") != std::string::npos) {
    // qemu-user runs a 32-bit guest at an offset in its own address space: the copy's mem file,
    // the host's, does not hold the guest's words at their addresses. The daemon says so.
    printf("no snapshot here: %s\nok\n", error.c_str());
    kill(program, SIGKILL);
    waitpid(program, nullptr, 0);
    return 0;
  }
  if (snapshot == nullptr) fprintf(stderr, "no snapshot: %s\n", error.c_str());
  CHECK(snapshot != nullptr && called);
  const bool qemu = !snapshot->threads_held;
  if (qemu) {
    printf("threads not held: %s\n", snapshot->note.c_str());
    CHECK(snapshot->note.find("copied while it ran") != std::string::npos);
  } else {
    CHECK(snapshot->note.empty());
    // main and the holder (and a sanitizer's own), not the snapshot thread
    CHECK(snapshot->threads.size() == threads_before_snapshot - 1);
  }
  CHECK(qemu == UnderQemu());
  CHECK(snapshot->copy_pid > 0 && snapshot->copy_pid != program);
  printf("stall %llu us for %zu threads\n", static_cast<unsigned long long>(snapshot->stall_us),
         snapshot->threads.size());
  // bionic's allocator lists every block (each at least as large as asked); glibc's none.
  CHECK(snapshot->blocks_listed == kAllocatorListsBlocks);
  if (snapshot->blocks_listed) {
    size_t found = 0;
    for (int i = 0; i < g_shared->count; ++i) {
      for (const HeapBlock& b : snapshot->heap_blocks) {
        found += b.address == g_shared->blocks[i].address && b.size >= g_shared->blocks[i].size;
      }
    }
    printf("%zu blocks listed, the program's %zu of %d among them\n",
           snapshot->heap_blocks.size(), found, g_shared->count);
    CHECK(found == static_cast<size_t>(g_shared->count));
  }

  std::vector<HeapBlock> blocks;
  for (int i = 0; i < g_shared->count; ++i) {
    blocks.push_back({g_shared->blocks[i].address, g_shared->blocks[i].size});
  }
  // The noted blocks alone, all known or not; and on bionic among the blocks the allocator
  // listed (the copy's list of them must be no root).
  std::vector<HeapBlock> with_listed = blocks;
  for (const HeapBlock& b : snapshot->heap_blocks) {
    bool noted = false;
    for (const HeapBlock& n : blocks) noted = noted || n.address == b.address;
    if (!noted) with_listed.push_back(b);
  }
  for (int pass = 0; pass < (snapshot->blocks_listed ? 3 : 2); ++pass) {
    const bool complete = pass != 1;
    const std::vector<HeapBlock>& swept = pass == 2 ? with_listed : blocks;
    SnapshotMemory memory(snapshot->mem_fd);
    HeapSweep sweep(swept, sizeof(void*));
    std::string not_scanned;
    sweep.Run(RootsOf(*snapshot, swept, complete, &not_scanned), &memory);
    if (!not_scanned.empty()) printf("%s\n", not_scanned.c_str());
    int wrong = 0;
    for (int i = 0; i < g_shared->count; ++i) {
      const Expected& e = g_shared->blocks[i];
      const bool reachable = sweep.reachable(static_cast<size_t>(i));
      // Without held threads a stale copy on a stack may keep a dropped block: never the reverse.
      if (reachable != (e.reachable != 0) && (!qemu || e.reachable)) {
        fprintf(stderr, "pass %d (complete=%d): block %d (%s) %s\n", pass, complete, i, e.how,
                reachable ? "reachable" : "unreachable");
        ++wrong;
      }
    }
    printf("pass %d, complete=%d: %llu root bytes, %llu block bytes read\n", pass, complete,
           static_cast<unsigned long long>(sweep.figures().root_bytes),
           static_cast<unsigned long long>(sweep.figures().block_bytes));
    CHECK(wrong == 0);
  }

  // The copy exits once the snapshot is let go, and the program runs on.
  const int copy = snapshot->copy_pid;
  snapshot.reset();
  const std::string copy_dir = "/proc/" + std::to_string(copy);
  bool gone = false;
  for (int i = 0; i < 5000 && !gone; ++i) {
    char state[256] = {};
    FILE* f = fopen((copy_dir + "/stat").c_str(), "r");
    if (f == nullptr) {
      gone = true;
      break;
    }
    const size_t n = fread(state, 1, sizeof(state) - 1, f);
    fclose(f);
    const char* close_paren = strrchr(state, ')');
    gone = n > 0 && close_paren != nullptr && close_paren[2] == 'Z';  // a zombie, not yet reaped
    if (!gone) usleep(1000);
  }
  CHECK(gone);
  CHECK(kill(program, 0) == 0);
  CHECK(Allocates());
  // A second snapshot of the same process works too.
  snapshot = snapshots.Take(program, kNativeLayout, [] {}, true, 1 << 20, &error);
  CHECK(snapshot != nullptr);
  // And one taken while that one's copy still lives (its sweep under way): at once, the thread
  // not waiting for the first copy to end.
  std::unique_ptr<ProcessSnapshot> next =
      snapshots.Take(program, kNativeLayout, [] {}, true, 1 << 20, &error);
  if (next == nullptr) fprintf(stderr, "no second live copy: %s\n", error.c_str());
  CHECK(next != nullptr && next->copy_pid != snapshot->copy_pid);
  CHECK(next->stall_us < 500 * 1000);
  CHECK(next->blocks_listed == kAllocatorListsBlocks);
  snapshot.reset();
  next.reset();
  CHECK(Allocates());
  if (kAllocatorListsBlocks) TestAHeldAllocatorIsLetGo(channel[0]);
  // The daemon gone (its end closed) while the allocator is held: let go at once.
  if (kAllocatorListsBlocks) {
    const SnapshotRequest hold{kSnapshotMagic, kSnapshotVersion, sizeof(SnapshotRequest),
                               kSnapshotHoldAllocator, 1000};
    CHECK(send(channel[0], &hold, sizeof(hold), 0) == sizeof(hold));
    SnapshotReady answer{};
    CHECK(recv(channel[0], &answer, sizeof(answer), 0) == sizeof(answer));
    CHECK(answer.id == 1000 && answer.status == kSnapshotAllocatorHeld);
  }
  shutdown(channel[0], SHUT_RDWR);  // as the daemon's death closes it
  const int ms = MsUntilItAllocates();
  printf("the daemon's end closed: the program allocates again after %d ms\n", ms);
  CHECK(ms >= 0 && ms < kAllocatorHoldMs / 2);
  kill(program, SIGKILL);
  int status;
  waitpid(program, &status, 0);
  printf("ok\n");
  return 0;
}

// The interface bionic (or the emulation layer) loads: heapprofd_initialize plus one replacement
// per MallocDispatch slot (malloc, calloc and free in client/malloc_free_hooks.cc); and the entry
// the custom heaps report to (include/droidheap/heaps.h). Each replacement checks that this
// thread's view of the session is current (one compare), asks this thread's sampler (allocations)
// or the table of sampled addresses (frees) whether the call may concern the profile, and counts
// the call in this thread's slot of the exact totals (client/thread_totals.h); nearly always the
// call does not concern the profile, and the replacement is done with the previous allocator's
// answer. Otherwise it records a sampled allocation, or reports the free of a sampled block so the
// daemon can match it. The hook path's rules: client/hook_path.h.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "client/client.h"
#include "client/custom_heaps.h"
#include "client/hook_path.h"
#include "client/profileable_process.h"
#include "client/snapshot_thread.h"

namespace droidheap {

const MallocDispatch* g_previous = nullptr;
DROIDHEAP_TLS HookThread t_thread;
namespace {
// Until the first session an empty table (never written: zero pages that frees only read), so
// that a free needs no test of the pointer.
SampledAddresses g_no_sampled;
}  // namespace
std::atomic<const SampledAddresses*> g_sampled{&g_no_sampled};

namespace {

std::atomic<Client*> g_client{nullptr};
// The number of the latest session (from 1; set before its client: a thread whose samplers
// belong to another restarts them, see Refresh).
std::atomic<uint32_t> g_session{0};

constexpr char kDefaultSocket[] = "/dev/socket/heapprofd";

class HookGuard {
 public:
  HookGuard() : entered_(!t_thread.in_hook) {
    if (entered_) t_thread.EnterHook();
  }
  ~HookGuard() {
    if (entered_) t_thread.LeaveHook();
  }
  bool entered() const { return entered_; }

 private:
  bool entered_;
};

Client* ActiveClient() {
  Client* client = g_client.load(std::memory_order_acquire);
  return (client != nullptr && client->enabled()) ? client : nullptr;
}

}  // namespace

void Refresh(uint32_t generation) {
  // Pairs with NewGeneration's release: what Install wrote before it (the session, the client) is
  // seen from here on.
  std::atomic_thread_fence(std::memory_order_acquire);
  HookThread& self = t_thread;
  self.generation = generation;  // first: the refresh may allocate, and is not re-entered
  const uint32_t session = g_session.load(std::memory_order_relaxed);
  if (self.sampler.session() != session) self.sampler.Restart();
  if (self.custom_sampler.session() != session) self.custom_sampler.Restart();
  // Generation 0: no session yet, or a child that inherited the hooks (Client::generation()).
  Client* client = generation != 0 ? ActiveClient() : nullptr;
  if (client == nullptr) {
    self.totals.Refresh(nullptr, nullptr, false, false);
  } else {
    self.totals.Refresh(client->totals(), &client->identity(), client->records_malloc(),
                        kLibcCachesPid && !Client::ChildrenReadGenerationZero());
  }
}

void CountAllocElsewhere(const ThreadTotals& totals, const void* ptr) {
  HeapCounters* counters = totals.malloc_counters();
  if (counters != nullptr) totals.CountAlloc(counters, g_previous->malloc_usable_size(ptr));
}

void CountFreeElsewhere(const ThreadTotals& totals, const void* ptr) {
  HeapCounters* counters = totals.malloc_counters();
  if (counters != nullptr) totals.CountFree(counters, g_previous->malloc_usable_size(ptr));
}

namespace {

// A new block the sampler let through (Sampler::MaybeSampled): recorded when SampleSize says it
// is sampled. Returns it.
void* RecordIfSampled(HookThread& self, void* ptr, size_t size) {
  if (ptr == nullptr || self.in_hook) return ptr;
  Client* client = ActiveClient();
  if (client == nullptr || !client->records_malloc()) return ptr;
  // Read after the client: at least the session that client belongs to.
  const uint32_t session = g_session.load(std::memory_order_relaxed);
  uint64_t sample_size = self.sampler.SampleSize(size, client->sampling_interval(),
                                                 client->random_seed(), session);
  if (sample_size == 0) return ptr;
  HookGuard guard;
  client->RecordAlloc(0, reinterpret_cast<uint64_t>(ptr), size, sample_size);
  return ptr;
}

// Before the real free of a block the table may hold (FreeMaybeSampled): its free is reported
// when it was sampled.
void RecordFreeIfSampled(void* ptr) {
  if (ptr == nullptr) return;
  Client* client = ActiveClient();
  if (client == nullptr) return;
  HookGuard guard;
  if (!guard.entered()) return;
  client->RecordFree(0, reinterpret_cast<uint64_t>(ptr));
}

// realloc's free of a sampled block (Client::BeginFree): reserved before the real call, published
// after it as what happened. The thread counts as in the hook in between: an allocation of a
// signal handler on it must not wait for that record.
class PendingFree {
 public:
  explicit PendingFree(void* ptr) : address_(reinterpret_cast<uint64_t>(ptr)) {
    if (ptr == nullptr || t_thread.in_hook || !MaybeSampledBlock(ptr)) return;
    Client* client = ActiveClient();
    if (client == nullptr) return;
    t_thread.EnterHook();
    if (client->BeginFree(0, address_, &reservation_)) {
      client_ = client;
    } else {
      t_thread.LeaveHook();
    }
  }
  void End(bool freed) {
    if (client_ == nullptr) return;
    client_->EndFree(0, address_, reservation_, freed);
    t_thread.LeaveHook();
  }

 private:
  const uint64_t address_;
  Client* client_ = nullptr;
  SharedRingBuffer::Reservation reservation_;
};

// A custom heap's report, on the program's thread: counted, and sampled as libc's calls are. As
// there, a child that inherited the hooks is kept out by this thread's totals and by the Record
// calls, each without a system call.
void ReportCustomHeap(droidheap_heap* heap, uint32_t event, uint64_t address, uint64_t size) {
  Client* client = ActiveClient();
  const uint32_t number = heap->number;
  if (client == nullptr || number == 0 || number > kMaxCustomHeaps) return;
  // After those: a report with no session to go to refreshes nothing (the refresh may allocate).
  // A custom heap's allocator called from our own hook path is not the program's doing.
  HookThread& self = CurrentThread();
  if (self.in_hook) return;
  HeapCounters* counters = self.totals.custom_counters(number);
  if (event == DROIDHEAP_EVENT_ALLOC) {
    if (counters != nullptr) self.totals.CountAlloc(counters, size);
    if (!self.custom_sampler.MaybeSampled(size)) return;
    const uint32_t session = g_session.load(std::memory_order_relaxed);
    const uint64_t sample_size = self.custom_sampler.SampleSize(
        size, client->sampling_interval(), client->random_seed(), session);
    if (sample_size == 0) return;
    HookGuard guard;
    client->RecordAlloc(number, address, size, sample_size);
  } else if (event == DROIDHEAP_EVENT_FREE) {
    if (counters != nullptr) self.totals.CountFree(counters, size);
    HookGuard guard;
    client->RecordFree(number, address);
  }
}

// How long a process that exits (exit() or the end of main; not _exit or a crash) waits for the
// daemon to catch up with its records (Client::WaitUntilDrained).
constexpr uint32_t kExitDrainTimeoutMs = 1000;

// At exit(): from bionic's heapprofd_finalize (its atexit handler, registered after the client's
// initialize returned, so it runs first), and from atexit() where no bionic calls finalize (the
// preload and emulation routes). Not a destructor: bionic runs a shared library's .fini_array only
// when it is unloaded, never at exit(). The first call ends the session; later ones find none.
void DrainAtExit() {
  Client* client = ActiveClient();
  if (client == nullptr) return;
  client->AnnounceExit();
  client->WaitUntilDrained(kExitDrainTimeoutMs);
}

// Where the session's daemon listens, from the options: a forked child profiled as a process of
// its own connects there again.
char g_socket_path[108];

void SetSocketPath(const char* options) {
  static const char kKey[] = "socket=";
  const char* found = options ? strstr(options, kKey) : nullptr;
  size_t len = 0;
  if (found != nullptr) {
    found += sizeof(kKey) - 1;
    len = strcspn(found, " ,");
  }
  if (len == 0 || len >= sizeof(g_socket_path)) {
    found = kDefaultSocket;
    len = sizeof(kDefaultSocket) - 1;
  }
  memcpy(g_socket_path, found, len);
  g_socket_path[len] = '\0';
}

// Makes `client` the one the hooks record to: a new session.
void Install(Client* client) {
  // Before the client is installed: what starting a thread allocates is not recorded.
  SnapshotRange ranges[kMaxProfilerRanges];
  size_t range_count = 0;
  const int channel = client->TakeSnapshotChannel(ranges, &range_count);
  if (channel >= 0) StartSnapshotThread(channel, ranges, range_count, g_previous);
  g_session.fetch_add(1, std::memory_order_relaxed);
  g_sampled.store(client->sampled(), std::memory_order_release);
  g_client.store(client, std::memory_order_release);
  Client::NewGeneration();
  CustomHeaps::StartSession(client, ReportCustomHeap);
  client->AnnounceRecording();
}

// A forked child's session, the parent's, ends here (its records would be booked against the
// parent). With fork teardown disabled the child then starts one of its own, from this point on.
void AtForkChild() {
  ForgetSnapshotThreadInChild();
  t_thread.totals.ForgetInChild();
  CustomHeaps::ResetInChild();
  Client* client = g_client.load(std::memory_order_acquire);
  if (client == nullptr) return;
  const bool own_session = client->enabled() && client->profiles_forked_children();
  client->DisableInChild();
  if (!own_session) return;
  Client* child = Client::Connect(g_socket_path, g_previous, kHelloForked);
  if (child != nullptr) Install(child);
}

}  // namespace

ThreadTotals& ThisThreadTotals() { return t_thread.totals; }

void* MallocMaybeSampled(HookThread& self, size_t size) {
  return RecordIfSampled(self, CountAlloc(self.totals, g_previous->malloc(size)), size);
}

void* CallocMaybeSampled(HookThread& self, size_t n, size_t size, size_t total) {
  return RecordIfSampled(self, CountAlloc(self.totals, g_previous->calloc(n, size)), total);
}

void FreeMaybeSampled(void* ptr) {
  if (g_sampled.load(std::memory_order_acquire)->Holds(reinterpret_cast<uint64_t>(ptr))) {
    RecordFreeIfSampled(ptr);
  }
  g_previous->free(ptr);
}

}  // namespace droidheap

using namespace droidheap;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT bool heapprofd_initialize(const MallocDispatch* previous, bool* /*zygote_child*/,
                                 const char* options) {
  Client* current = g_client.load(std::memory_order_acquire);
  if (current != nullptr && current->enabled()) return true;  // already profiling
  // The front calls this function from its own code (bionic's libc, the interposing library).
  if (!ProfileableProcess(__builtin_return_address(0))) return false;
  g_previous = previous;
  SetSocketPath(options);
  Client* client = Client::Connect(g_socket_path, previous, 0);
  if (client == nullptr) return false;
  static bool registered = false;
  if (!registered) {
    Client::PlaceGeneration();
    pthread_atfork(nullptr, nullptr, AtForkChild);
    atexit(DrainAtExit);
    ThreadTotals::CreateThreadKey();
    registered = true;
  }
  Install(client);
  return true;
}

// bionic calls it once, as the process exits.
EXPORT void heapprofd_finalize() {
  DrainAtExit();
  Client* client = g_client.load(std::memory_order_acquire);
  if (client != nullptr) client->Shutdown(kClientDisconnected);
}

// Leak-info entry points: bionic requires them to exist; heap profiling does not use them.
EXPORT void heapprofd_get_malloc_leak_info(uint8_t** info, size_t* overall_size, size_t* info_size,
                                           size_t* total_memory, size_t* backtrace_size) {
  if (info) *info = nullptr;
  if (overall_size) *overall_size = 0;
  if (info_size) *info_size = 0;
  if (total_memory) *total_memory = 0;
  if (backtrace_size) *backtrace_size = 0;
}
EXPORT void heapprofd_free_malloc_leak_info(uint8_t*) {}
EXPORT ssize_t heapprofd_malloc_backtrace(void*, uintptr_t*, size_t) { return 0; }
EXPORT bool heapprofd_write_malloc_leak_info(FILE*) { return false; }

// The rarer allocation calls (memalign and its kin): one path, sampled or not.
namespace droidheap {
namespace {

void* CountAndRecord(HookThread& self, bool may_sample, void* ptr, size_t size) {
  CountAlloc(self.totals, ptr);
  return may_sample ? RecordIfSampled(self, ptr, size) : ptr;
}

}  // namespace
}  // namespace droidheap

EXPORT void* heapprofd_realloc(void* ptr, size_t size) {
  HookThread& self = CurrentThread();
  const bool may_sample = self.sampler.MaybeSampled(size);
  HeapCounters* counters = ptr != nullptr ? self.totals.malloc_counters() : nullptr;
  const uint64_t old_size = counters != nullptr ? g_previous->malloc_usable_size(ptr) : 0;
  PendingFree pending(ptr);
  void* p = g_previous->realloc(ptr, size);
  // The old block is gone when the call succeeded, or when size 0 freed it; else it lives on.
  const bool freed = p != nullptr || size == 0;
  pending.End(freed);
  if (freed) {
    if (counters != nullptr) self.totals.CountFree(counters, old_size);
    CountAlloc(self.totals, p);
  }
  return may_sample ? RecordIfSampled(self, p, size) : p;
}

EXPORT void* heapprofd_memalign(size_t alignment, size_t size) {
  HookThread& self = CurrentThread();
  const bool may_sample = self.sampler.MaybeSampled(size);
  return CountAndRecord(self, may_sample, g_previous->memalign(alignment, size), size);
}

EXPORT int heapprofd_posix_memalign(void** out, size_t alignment, size_t size) {
  HookThread& self = CurrentThread();
  const bool may_sample = self.sampler.MaybeSampled(size);
  int rc = g_previous->posix_memalign(out, alignment, size);
  if (rc == 0) CountAndRecord(self, may_sample, *out, size);
  return rc;
}

EXPORT void* heapprofd_aligned_alloc(size_t alignment, size_t size) {
  HookThread& self = CurrentThread();
  const bool may_sample = self.sampler.MaybeSampled(size);
  return CountAndRecord(self, may_sample, g_previous->aligned_alloc(alignment, size), size);
}

#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
// 32-bit bionic's two extra slots. The sample is the size asked for, as for memalign.
EXPORT void* heapprofd_pvalloc(size_t size) {
  HookThread& self = CurrentThread();
  const bool may_sample = self.sampler.MaybeSampled(size);
  return CountAndRecord(self, may_sample, g_previous->pvalloc(size), size);
}

EXPORT void* heapprofd_valloc(size_t size) {
  HookThread& self = CurrentThread();
  const bool may_sample = self.sampler.MaybeSampled(size);
  return CountAndRecord(self, may_sample, g_previous->valloc(size), size);
}
#endif

EXPORT size_t heapprofd_malloc_usable_size(const void* ptr) {
  return g_previous->malloc_usable_size(ptr);
}
EXPORT droidheap_mallinfo heapprofd_mallinfo() { return g_previous->mallinfo(); }
EXPORT int heapprofd_mallopt(int param, int value) { return g_previous->mallopt(param, value); }
EXPORT int heapprofd_malloc_info(int options, FILE* fp) {
  return g_previous->malloc_info(options, fp);
}
EXPORT int heapprofd_malloc_iterate(uintptr_t base, size_t size,
                                    void (*callback)(uintptr_t, size_t, void*), void* arg) {
  return g_previous->malloc_iterate(base, size, callback, arg);
}
// Android 10's bionic looks the iterator up by this name (11 and later by the one above), and
// refuses a client without it: nothing would be profiled on such a phone.
EXPORT int heapprofd_iterate(uintptr_t base, size_t size,
                             void (*callback)(uintptr_t, size_t, void*), void* arg) {
  return heapprofd_malloc_iterate(base, size, callback, arg);
}
EXPORT void heapprofd_malloc_disable() { g_previous->malloc_disable(); }
EXPORT void heapprofd_malloc_enable() { g_previous->malloc_enable(); }

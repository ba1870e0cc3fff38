// bionic's two ways of loading the heap profiling client, reproduced for the emulated device:
//  1. at libc init (this library's constructor): when the property heapprofd.enable is non-empty
//     and either equals "all" or heapprofd.enable.<program name> is non-empty;
//  2. at run time: signal 36 sent with sigqueue (SI_QUEUE) and value 0 installs an ephemeral hook;
//     the next malloc restores the previous table, then starts a thread that loads the client.
// The client is <device root>/system/lib64/heapprofd_client.so (lib/ in a 32-bit build, as on a
// phone); its heapprofd_* entry points fill the dispatch table that is swapped in once
// heapprofd_initialize succeeds.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "emulation/dispatch.h"
#include "emulation/property_store.h"

namespace droidheap {
namespace {

constexpr int kProfilingSignal = 36;  // bionic's BIONIC_SIGNAL_PROFILER (__SIGRTMIN + 4)

enum LoaderState : int { kIdle, kEphemeralHookInstalled, kLoading };
std::atomic<int> g_loader_state{kIdle};
// The table in force before the ephemeral hook, restored by the first hooked call.
std::atomic<const MallocDispatch*> g_previous_dispatch{nullptr};

MallocDispatch g_client_dispatch;  // written once, by the loading thread, before publication
void* g_client_handle = nullptr;

// Program name as bionic matches it: basename of argv[0], cut at '@'.
bool ProgramName(char* out, size_t out_size) {
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* base = strrchr(buf, '/');
  base = base ? base + 1 : buf;
  size_t len = strcspn(base, "@");
  if (len == 0 || len >= out_size) return false;
  memcpy(out, base, len);
  out[len] = '\0';
  return true;
}

bool ProfilingEnabledAtStartup() {
  char value[256];
  if (!GetProperty("heapprofd.enable", value, sizeof(value))) return false;
  if (strcmp(value, "all") == 0) return true;
  char name[256];
  if (!ProgramName(name, sizeof(name))) return false;
  char key[300];
  snprintf(key, sizeof(key), "heapprofd.enable.%s", name);
  return GetProperty(key, value, sizeof(value));
}

template <typename Fn>
bool Resolve(void* handle, const char* suffix, Fn* out) {
  char name[64];
  snprintf(name, sizeof(name), "heapprofd_%s", suffix);
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  return *out != nullptr;
}

// Loads the client and swaps its table in. Runs on the loading thread or in the constructor.
void LoadClient() {
  const char* root = DeviceRoot();
  if (root == nullptr) return;
  char path[4096];
#if defined(__LP64__)
  snprintf(path, sizeof(path), "%s/system/lib64/heapprofd_client.so", root);
#else
  snprintf(path, sizeof(path), "%s/system/lib/heapprofd_client.so", root);
#endif
  if (g_client_handle == nullptr) {
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return;
    // bionic refuses a client that lacks any of these.
    HeapprofdFinalize finalize;
    void* leak_info[4];
    MallocDispatch d{};
    bool complete = Resolve(handle, "finalize", &finalize) &&
                    Resolve(handle, "get_malloc_leak_info", &leak_info[0]) &&
                    Resolve(handle, "free_malloc_leak_info", &leak_info[1]) &&
                    Resolve(handle, "malloc_backtrace", &leak_info[2]) &&
                    Resolve(handle, "write_malloc_leak_info", &leak_info[3]) &&
                    Resolve(handle, "calloc", &d.calloc) && Resolve(handle, "free", &d.free) &&
                    Resolve(handle, "mallinfo", &d.mallinfo) &&
                    Resolve(handle, "malloc", &d.malloc) &&
                    Resolve(handle, "malloc_usable_size", &d.malloc_usable_size) &&
                    Resolve(handle, "memalign", &d.memalign) &&
                    Resolve(handle, "posix_memalign", &d.posix_memalign) &&
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
                    Resolve(handle, "pvalloc", &d.pvalloc) &&
                    Resolve(handle, "valloc", &d.valloc) &&
#endif
                    Resolve(handle, "realloc", &d.realloc) &&
                    Resolve(handle, "malloc_iterate", &d.malloc_iterate) &&
                    Resolve(handle, "malloc_disable", &d.malloc_disable) &&
                    Resolve(handle, "malloc_enable", &d.malloc_enable) &&
                    Resolve(handle, "mallopt", &d.mallopt) &&
                    Resolve(handle, "aligned_alloc", &d.aligned_alloc) &&
                    Resolve(handle, "malloc_info", &d.malloc_info);
    if (!complete) {
      dlclose(handle);
      return;
    }
    g_client_dispatch = d;
    g_client_handle = handle;
  }
  HeapprofdInitialize initialize;
  if (!Resolve(g_client_handle, "initialize", &initialize)) return;
  char options[4200];
  snprintf(options, sizeof(options), "socket=%s/dev/socket/heapprofd", root);
  bool zygote_child = false;
  // The client is handed glibc's table: it forwards to it, whatever is installed later.
  if (initialize(&kLibcDispatch, &zygote_child, options)) {
    g_dispatch.store(&g_client_dispatch, std::memory_order_release);
  }
}

void* LoadClientThread(void*) {
  LoadClient();
  g_loader_state.store(kIdle, std::memory_order_release);
  return nullptr;
}

// Runs instead of the real entry point once, on the first allocation after the signal.
void StartLoadingThread() {
  int expected = kEphemeralHookInstalled;
  if (!g_loader_state.compare_exchange_strong(expected, kLoading)) return;
  // Restore first: pthread_create allocates, and must not come back here.
  g_dispatch.store(g_previous_dispatch.load(std::memory_order_relaxed), std::memory_order_release);
  pthread_attr_t attr;
  pthread_t thread;
  if (pthread_attr_init(&attr) != 0) {
    g_loader_state.store(kIdle);
    return;
  }
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&thread, &attr, LoadClientThread, nullptr) != 0) g_loader_state.store(kIdle);
  pthread_attr_destroy(&attr);
}

void* EphemeralMalloc(size_t size) {
  StartLoadingThread();
  return CurrentDispatch()->malloc(size);
}
void* EphemeralCalloc(size_t n, size_t size) {
  StartLoadingThread();
  return CurrentDispatch()->calloc(n, size);
}
void* EphemeralRealloc(void* p, size_t size) {
  StartLoadingThread();
  return CurrentDispatch()->realloc(p, size);
}

MallocDispatch g_ephemeral_dispatch;

void HandleProfilingSignal(int, siginfo_t* info, void*) {
  // Atomic stores only: this runs in whatever the interrupted thread was doing.
  int saved_errno = errno;
  if (info->si_code == SI_QUEUE && info->si_value.sival_int == 0) {
    int expected = kIdle;
    if (g_loader_state.compare_exchange_strong(expected, kEphemeralHookInstalled)) {
      g_previous_dispatch.store(g_dispatch.load(std::memory_order_acquire),
                                std::memory_order_relaxed);
      g_dispatch.store(&g_ephemeral_dispatch, std::memory_order_release);
    }
  }
  errno = saved_errno;
}

__attribute__((constructor)) void InitEmulatedLibc() {
  g_ephemeral_dispatch = kLibcDispatch;
  g_ephemeral_dispatch.malloc = EphemeralMalloc;
  g_ephemeral_dispatch.calloc = EphemeralCalloc;
  g_ephemeral_dispatch.realloc = EphemeralRealloc;

  struct sigaction action {};
  action.sa_sigaction = HandleProfilingSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(kProfilingSignal, &action, nullptr);

  if (ProfilingEnabledAtStartup()) LoadClient();
}

}  // namespace
}  // namespace droidheap

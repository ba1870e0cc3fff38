// See client_loader.h. Async-signal safety: the signal handler does atomic stores only; all the
// work (dlopen, connecting) happens on the loading thread.
#include "interposer/client_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "common/small_file.h"
#include "interposer/dispatch.h"

namespace droidheap {
namespace {

constexpr int kProfilingSignal = 36;  // bionic's BIONIC_SIGNAL_PROFILER (__SIGRTMIN + 4)
constexpr int kHeapprofdSignalValue = 0;

char g_client_path[4096];
char g_socket_option[4200];  // "socket=<path>", as heapprofd_initialize takes it

enum LoaderState : int { kIdle, kEphemeralHookInstalled, kLoading };
std::atomic<int> g_loader_state{kIdle};
// The table in force before the ephemeral hook, restored by the first hooked call.
std::atomic<const MallocDispatch*> g_previous_dispatch{nullptr};

MallocDispatch g_client_dispatch;  // written once, by the loading thread, before publication
void* g_client_handle = nullptr;
struct sigaction g_previous_action;

template <typename Fn>
bool Resolve(void* handle, const char* suffix, Fn* out) {
  char name[64];
  snprintf(name, sizeof(name), "heapprofd_%s", suffix);
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  return *out != nullptr;
}

bool OpenClient() {
  void* handle = dlopen(g_client_path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
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
                  Resolve(handle, "mallinfo", &d.mallinfo) && Resolve(handle, "malloc", &d.malloc) &&
                  Resolve(handle, "malloc_usable_size", &d.malloc_usable_size) &&
                  Resolve(handle, "memalign", &d.memalign) &&
                  Resolve(handle, "posix_memalign", &d.posix_memalign) &&
#if defined(DROIDHEAP_DEPRECATED_MALLOC_SLOTS)
                  Resolve(handle, "pvalloc", &d.pvalloc) && Resolve(handle, "valloc", &d.valloc) &&
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
    return false;
  }
  g_client_dispatch = d;
  g_client_handle = handle;
  return true;
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

void PassToPreviousHandler(int sig, siginfo_t* info, void* context) {
  if (g_previous_action.sa_flags & SA_SIGINFO) {
    if (g_previous_action.sa_sigaction != nullptr) g_previous_action.sa_sigaction(sig, info, context);
  } else if (g_previous_action.sa_handler != SIG_DFL && g_previous_action.sa_handler != SIG_IGN) {
    g_previous_action.sa_handler(sig);
  }
  // SIG_DFL would kill the process: a profiling request this library does not serve is ignored.
}

void HandleProfilingSignal(int sig, siginfo_t* info, void* context) {
  // Atomic stores only: this runs in whatever the interrupted thread was doing.
  int saved_errno = errno;
  if (info->si_code == SI_QUEUE && info->si_value.sival_int == kHeapprofdSignalValue) {
    int expected = kIdle;
    if (g_loader_state.compare_exchange_strong(expected, kEphemeralHookInstalled)) {
      g_previous_dispatch.store(g_dispatch.load(std::memory_order_acquire),
                                std::memory_order_relaxed);
      g_dispatch.store(&g_ephemeral_dispatch, std::memory_order_release);
    }
  } else {
    PassToPreviousHandler(sig, info, context);
  }
  errno = saved_errno;
}

}  // namespace

bool SetClientLocation(const char* library_path, const char* socket_path) {
  int n = snprintf(g_client_path, sizeof(g_client_path), "%s", library_path);
  int m = snprintf(g_socket_option, sizeof(g_socket_option), "socket=%s", socket_path);
  return n > 0 && static_cast<size_t>(n) < sizeof(g_client_path) && m > 0 &&
         static_cast<size_t>(m) < sizeof(g_socket_option);
}

bool LoadClient() {
  if (g_client_path[0] == '\0') return false;
  if (g_client_handle == nullptr && !OpenClient()) return false;
  HeapprofdInitialize initialize;
  if (!Resolve(g_client_handle, "initialize", &initialize)) return false;
  bool zygote_child = false;
  // The client is handed the real allocator's table: it forwards to it, whatever is installed
  // later.
  if (!initialize(RealDispatch(), &zygote_child, g_socket_option)) return false;
  g_dispatch.store(&g_client_dispatch, std::memory_order_release);
  return true;
}

void InstallProfilingSignalRoute() {
  g_ephemeral_dispatch = *RealDispatch();
  g_ephemeral_dispatch.malloc = EphemeralMalloc;
  g_ephemeral_dispatch.calloc = EphemeralCalloc;
  g_ephemeral_dispatch.realloc = EphemeralRealloc;

  struct sigaction action {};
  action.sa_sigaction = HandleProfilingSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(kProfilingSignal, &action, &g_previous_action);
}

bool ProgramName(char* out, size_t out_size) {
  char buf[1024];
  if (ReadSmallFile("/proc/self/cmdline", buf, sizeof(buf)) <= 0) return false;
  const char* base = strrchr(buf, '/');
  base = base ? base + 1 : buf;
  size_t len = strcspn(base, "@");
  if (len == 0 || len >= out_size) return false;
  memcpy(out, base, len);
  out[len] = '\0';
  return true;
}

}  // namespace droidheap

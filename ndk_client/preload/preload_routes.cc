// The preload library (libdroidheap_preload.so): where bionic will not load a profiling client
// (a phone without root), `LD_PRELOAD` puts this library in front of libc. It exports the malloc
// family (interposer/malloc_entry_points.cc) over the next library's
// (interposer/next_dispatch.cc) and loads the client the two ways bionic would:
//  - at start-up, when $DROIDHEAP_PROFILE names this program (or is "all"): droidheap sets it for
//    the program it starts, as it sets heapprofd.enable.<name> where it may;
//  - at run time, through the profiling signal, for a program started earlier with it preloaded.
// Its client is the heapprofd_client.so beside it, which connects to the droidheapd.socket beside
// it: droidheap pushes all three into one directory.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interposer/client_loader.h"
#include "interposer/dispatch.h"

namespace droidheap {
namespace {

bool ProfilingRequestedAtStartup() {
  const char* wanted = getenv("DROIDHEAP_PROFILE");
  if (wanted == nullptr || wanted[0] == '\0') return false;
  if (strcmp(wanted, "all") == 0) return true;
  char name[256];
  return ProgramName(name, sizeof(name)) && strcmp(name, wanted) == 0;
}

// This library's directory, from the path the loader opened it by.
bool OwnDirectory(char* out, size_t out_size) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return false;
  }
  const char* slash = strrchr(info.dli_fname, '/');
  if (slash == nullptr) return snprintf(out, out_size, ".") > 0;
  size_t len = static_cast<size_t>(slash - info.dli_fname);
  if (len >= out_size) return false;
  memcpy(out, info.dli_fname, len);
  out[len] = '\0';
  return true;
}

__attribute__((constructor)) void InitPreload() {
  RealDispatch();  // resolved now, while the program is still single-threaded
  InstallProfilingSignalRoute();
  char directory[4096], library[4200], socket[4200];
  if (!OwnDirectory(directory, sizeof(directory))) return;
  snprintf(library, sizeof(library), "%s/heapprofd_client.so", directory);
  snprintf(socket, sizeof(socket), "%s/droidheapd.socket", directory);
  if (!SetClientLocation(library, socket)) return;
  if (ProfilingRequestedAtStartup()) LoadClient();
}

}  // namespace
}  // namespace droidheap

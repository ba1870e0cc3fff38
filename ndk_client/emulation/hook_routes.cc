// bionic's rule for loading the heap profiling client, reproduced for the emulated device: at libc
// init (this library's constructor) when the property heapprofd.enable is non-empty and either
// equals "all" or heapprofd.enable.<program name> is non-empty; at run time through the profiling
// signal (interposer/client_loader.h). The client is <device root>/system/lib64/
// heapprofd_client.so (lib/ in a 32-bit build, as on a phone), and it connects to <device root>/
// dev/socket/heapprofd, where bionic's connects on a phone.
#include <stdio.h>
#include <string.h>

#include "emulation/property_store.h"
#include "interposer/client_loader.h"

namespace droidheap {
namespace {

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

__attribute__((constructor)) void InitEmulatedLibc() {
  InstallProfilingSignalRoute();
  const char* root = DeviceRoot();
  if (root == nullptr) return;
  char library[4096], socket[4096];
#if defined(__LP64__)
  snprintf(library, sizeof(library), "%s/system/lib64/heapprofd_client.so", root);
#else
  snprintf(library, sizeof(library), "%s/system/lib/heapprofd_client.so", root);
#endif
  snprintf(socket, sizeof(socket), "%s/dev/socket/heapprofd", root);
  if (!SetClientLocation(library, socket)) return;
  if (ProfilingEnabledAtStartup()) LoadClient();
}

}  // namespace
}  // namespace droidheap

// The check heapprofd_initialize makes before it connects; the host names the cause to the user
// from the program's ELF file (droidheap/program_allocator.py).
//
// - A program whose malloc is another module's (an allocator linked into the executable, or a
//   sanitizer's runtime, as clang links it) never calls the front that loaded the client: its
//   profile would hold nothing, and the client's own blocks would go to that other allocator,
//   which may count them as the program's (AddressSanitizer reported them leaked at exit, and
//   changed the program's exit status). The program's malloc is the first definition in the
//   global search order (the executable, the preloaded libraries, then libc), which
//   dlsym(RTLD_DEFAULT) finds as the dynamic linker binds the program's calls.
// - AddressSanitizer's runtime (HWASan's alike) intercepts memcpy, which the client's stack copy
//   calls, and checks every byte read: the guard zones it poisons between the program's stack
//   variables made it report the copy and end the program, even where the runtime is a library
//   after droidheap's (gcc's -fsanitize=address), whose malloc the client would otherwise reach.
#include "client/profileable_process.h"

#include <dlfcn.h>

namespace droidheap {
namespace {

bool MallocReachesLoader(const void* loader_code) {
  void* program_malloc = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info found{};
  Dl_info loader{};
  if (program_malloc == nullptr || dladdr(program_malloc, &found) == 0 ||
      dladdr(loader_code, &loader) == 0 || found.dli_fbase == nullptr) {
    return true;
  }
  return found.dli_fbase == loader.dli_fbase;
}

bool MemoryAccessesChecked() {
  return dlsym(RTLD_DEFAULT, "__asan_init") != nullptr ||
         dlsym(RTLD_DEFAULT, "__hwasan_init") != nullptr;
}

}  // namespace

bool ProfileableProcess(const void* loader_code) {
  return MallocReachesLoader(loader_code) && !MemoryAccessesChecked();
}

}  // namespace droidheap

// DwarfUnwinder on another ABI's process, from outside: the stacks unwind_capture_helper (built
// for that ABI: the 32-bit build's, run by tests/unit/test_native.py) captured the way the client
// does, unwound here through its /proc/<pid>/maps and /proc/<pid>/mem with the layout its capture
// names, must equal libgcc's in-process unwind of each. This is what a 64-bit droidheapd does
// with a 32-bit app's records on a phone.
//   cross_abi_unwind_test HELPER
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "tests/stack_capture.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_unwinder.h"

using namespace droidheap;
using namespace droidheap::stack_capture;

extern char** environ;

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cross_abi_unwind_test HELPER\n");
    return 2;
  }
  int to_helper[2], from_helper[2];
  CHECK(pipe2(to_helper, O_CLOEXEC) == 0 && pipe2(from_helper, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_helper[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_helper[1], STDOUT_FILENO);
  pid_t pid;
  char* helper_argv[] = {argv[1], nullptr};
  CHECK(posix_spawn(&pid, argv[1], &actions, nullptr, helper_argv, environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  close(to_helper[0]);
  close(from_helper[1]);

  uint32_t count = 0;
  CHECK(ReadAll(from_helper[0], &count, sizeof(count)) && count > 0 && count < 16);
  std::vector<Capture> captures(count);
  std::vector<Abi> abis(count);
  for (uint32_t i = 0; i < count; ++i) CHECK(ReadCapture(from_helper[0], &captures[i], &abis[i]));

  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/maps", static_cast<int>(pid));
  int maps_fd = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof(path), "/proc/%d/mem", static_cast<int>(pid));
  int mem_fd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(maps_fd >= 0 && mem_fd >= 0);
  ElfCache elf_cache;
  DwarfUnwinder unwinder(&elf_cache);
  ProcessMaps maps;
  CHECK(maps.Reload(maps_fd));
  const RegisterLayout* layout = nullptr;
  for (uint32_t i = 0; i < count; ++i) {
    layout = LayoutOf(abis[i]);
    CHECK(layout != nullptr);
    const Capture& capture = captures[i];
    StackMemory memory(capture.regs[layout->sp], capture.stack.data(), capture.stack.size(),
                       mem_fd);
    UnwindResult result;
    unwinder.Unwind(*layout, capture.regs, capture.stack_top, memory, &maps, maps_fd, 512,
                    &result);
    result.pcs.erase(result.pcs.begin());  // the capturing frame, which the reference omits
    if (result.pcs != capture.reference || result.error != UnwindError::kNone) {
      fprintf(stderr, "capture %u (%s): error %u\n  droidheap:", i, layout->name,
              static_cast<unsigned>(result.error));
      for (uint64_t pc : result.pcs) fprintf(stderr, " %llx", static_cast<unsigned long long>(pc));
      fprintf(stderr, "\n  libgcc:   ");
      for (uint64_t pc : capture.reference) {
        fprintf(stderr, " %llx", static_cast<unsigned long long>(pc));
      }
      fprintf(stderr, "\n");
      kill(pid, SIGKILL);
      return 1;
    }
  }
  CHECK(unwinder.stats().cfi_frames > 0);
  close(to_helper[1]);  // the helper may go now
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  printf("cross_abi_unwind_test: %u %s stacks unwound by %s: ok\n", count, layout->name,
         kNativeLayout.name);
  return 0;
}

// DescendantWatch: the programs a process tree exec'd are found, through the kernel's child lists
// and through every process's parent alike; a forked copy that never exec'd is not a program; and
// the ones that connected are left out.
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/numbered_entries.h"
#include "common/small_file.h"
#include "daemon/clock.h"
#include "daemon/descendant_watch.h"
#include "tests/test_util.h"

using droidheap::DescendantWatch;
using droidheap::MonotonicUs;

namespace {

const char* Shell() { return access("/system/bin/sh", X_OK) == 0 ? "/system/bin/sh" : "/bin/sh"; }

bool Has(const std::vector<DescendantWatch::Program>& programs, const std::string& cmdline) {
  for (const auto& program : programs) {
    if (program.cmdline == cmdline) return true;
  }
  return false;
}

std::string CmdlineOf(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
  char cmdline[256];
  return droidheap::ReadSmallFile(path, cmdline, sizeof(cmdline)) > 0 ? cmdline : "";
}

// Looks until both of the shell's programs are seen (2 s at most).
std::vector<DescendantWatch::Program> LookForPrograms(DescendantWatch* watch) {
  std::vector<DescendantWatch::Program> programs;
  for (int attempt = 0; attempt < 200; ++attempt) {
    watch->Look(MonotonicUs() / 1000);
    programs = watch->Unconnected({});
    if (programs.size() >= 2) break;
    usleep(10 * 1000);
  }
  return programs;
}

void TestFindsTheProgramsATreeExeced(bool use_child_lists) {
  // A forked copy, which never execs, and a shell that runs a program as its child.
  const pid_t copy = fork();
  if (copy == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with this test, however it ends
    for (;;) pause();
  }
  const pid_t shell = fork();
  if (shell == 0) {
    setpgid(0, 0);  // its child in its group, to be killed with it
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execl(Shell(), "sh", "-c", "sleep 3; :", static_cast<char*>(nullptr));
    _exit(127);
  }
  CHECK(copy > 0 && shell > 0);
  DescendantWatch watch({getpid()}, use_child_lists);
  const auto programs = LookForPrograms(&watch);
  for (const auto& program : programs) {
    printf("pid %d ran %s\n", program.pid, program.cmdline.c_str());
  }
  fflush(stdout);
  CHECK(programs.size() == 2);
  CHECK(Has(programs, "sh -c sleep 3; :"));
  CHECK(Has(programs, "sleep 3"));
  for (const auto& program : programs) CHECK(program.pid != copy);
  // The shell connected: only its child is left.
  const auto unconnected = watch.Unconnected({shell});
  CHECK(unconnected.size() == 1 && unconnected[0].cmdline == "sleep 3");
  kill(-shell, SIGKILL);
  kill(copy, SIGKILL);
  for (pid_t child : {copy, shell}) CHECK(waitpid(child, nullptr, 0) == child);
  // The shell's child is gone too before the next test looks (adopted by this process when it is
  // its pid namespace's init, as in the Android userland's test run: reaped here).
  for (int attempt = 0; attempt < 100 && !CmdlineOf(unconnected[0].pid).empty(); ++attempt) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    usleep(10 * 1000);
  }
}

void TestWatchesNothingWithoutRoots() {
  DescendantWatch watch({});
  CHECK(watch.NextLookMs() == 0);
}

// Whether listing /proc shows this process: not under qemu-user with a -L prefix that holds an
// empty /proc (the bionic runs), which it lists in place of the real one.
bool ProcListsThisProcess() {
  std::vector<int> pids;
  droidheap::ListNumberedEntries("/proc", &pids);
  return std::find(pids.begin(), pids.end(), getpid()) != pids.end();
}

}  // namespace

int main() {
  TestWatchesNothingWithoutRoots();
  TestFindsTheProgramsATreeExeced(true);
  if (ProcListsThisProcess()) {
    TestFindsTheProgramsATreeExeced(false);
  } else {
    printf("every process's parent case skipped: listing /proc shows an empty directory here "
           "(qemu-user's -L prefix)\n");
  }
  printf("ok\n");
  return 0;
}

// ProcessMatcher::ExecedFrom: a process whose socket closed is known to have exec'd by the file
// it runs now, even where its arguments are the same as before (or not yet set: a busy machine
// keeps an exec between its new file and its arguments for as long as it likes); one that only
// lives on, or died, did not exec.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "daemon/process_matcher.h"
#include "tests/test_util.h"

using droidheap::ProcessMatcher;

namespace {

const char* Shell() { return access("/system/bin/sh", X_OK) == 0 ? "/system/bin/sh" : "/bin/sh"; }

// A forked copy of this test that waits until told, then execs the shell (to sleep) or exits.
struct Child {
  pid_t pid = -1;
  int go = -1;

  explicit Child(bool exec) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with this test, however it ends
      close(fds[1]);
      char byte;
      if (read(fds[0], &byte, 1) != 1 || !exec) _exit(0);
      execl(Shell(), Shell(), "-c", "exec sleep 30", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[0]);
    go = fds[1];
  }
  ~Child() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  void Go() {
    CHECK(write(go, "g", 1) == 1);
    close(go);
  }
  // Its arguments once they are others than `cmdline`, and set (2 s at most).
  std::string WaitForCmdlineOtherThan(const std::string& cmdline) const {
    std::string now;
    for (int i = 0; i < 200; ++i) {
      now = ProcessMatcher::ReadCmdline(pid);
      if (!now.empty() && now != cmdline) return now;
      usleep(10000);
    }
    CHECK(!"its arguments never changed");
    return now;
  }
};

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

void TestAnExecIsKnownByTheFileItRuns() {
  Child child(true);
  const std::string cmdline = ProcessMatcher::ReadCmdline(child.pid);
  const std::string exe = ProcessMatcher::ReadExe(child.pid);
  CHECK(!cmdline.empty() && !exe.empty());
  CHECK(!ProcessMatcher::ExecedFrom(child.pid, cmdline, exe));  // still this test
  child.Go();
  // (The shell may run sleep in its place.)
  const std::string cmdline_now = child.WaitForCmdlineOtherThan(cmdline);
  CHECK(ProcessMatcher::ExecedFrom(child.pid, cmdline, exe));
  // Asked with the arguments it has now, only its file tells (a qemu-user program's file is
  // qemu's before and after).
  if (Basename(exe).compare(0, 5, "qemu-") == 0) {
    printf("the exec's file is qemu's on both sides: told by its arguments alone\n");
  } else {
    CHECK(ProcessMatcher::ReadExe(child.pid) != exe);
    CHECK(ProcessMatcher::ExecedFrom(child.pid, cmdline_now, exe));
  }
}

void TestADeadProcessDidNotExec() {
  Child child(false);
  const std::string cmdline = ProcessMatcher::ReadCmdline(child.pid);
  const std::string exe = ProcessMatcher::ReadExe(child.pid);
  child.Go();
  for (int i = 0; i < 200 && !ProcessMatcher::ReadExe(child.pid).empty(); ++i) usleep(10000);
  CHECK(ProcessMatcher::ReadExe(child.pid).empty());  // a zombie's file is gone with its memory
  CHECK(!ProcessMatcher::ExecedFrom(child.pid, cmdline, exe));
}

}  // namespace

int main() {
  TestAnExecIsKnownByTheFileItRuns();
  TestADeadProcessDidNotExec();
  printf("process_matcher_test: ok\n");
  return 0;
}

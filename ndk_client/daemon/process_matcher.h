// Decides whether a connecting process belongs to the session, by pid or by program name as
// bionic derives it (basename of argv[0], cut at '@'), as a process started for the session or
// one of its descendants (the programs it execs, which load the client only when the session's
// start property names them too), or, when forked children are profiled
// (--disable-fork-teardown), as the child of a process it took before. Owned by the daemon's main
// thread.
#pragma once

#include <string>
#include <vector>

namespace droidheap {

class ProcessMatcher {
 public:
  ProcessMatcher(std::vector<int> pids, std::vector<int> spawned, std::vector<std::string> names,
                 bool all, bool forked_children)
      : pids_(std::move(pids)),
        spawned_(std::move(spawned)),
        names_(std::move(names)),
        all_(all),
        forked_children_(forked_children) {}

  bool IsTarget(int pid) const;
  // `pid` connected and was accepted: its forked children are targets too, if so configured.
  void Accepted(int pid) { accepted_.push_back(pid); }
  const std::vector<int>& accepted() const { return accepted_; }

  // The parent of `pid` (/proc/pid/stat), 0 when unknown.
  static int ReadParentPid(int pid);

  // /proc/pid/cmdline as a list of arguments, with a qemu-user launcher (qemu-aarch64 [options])
  // removed, so that an emulated program is known by its own name.
  static std::vector<std::string> ReadArguments(int pid);
  // ReadArguments joined by spaces, as the trace names a process.
  static std::string ReadCmdline(int pid);
  // The file /proc/pid/exe names ("" when unreadable: gone, or not ours to look at).
  static std::string ReadExe(int pid);
  // Whether `pid`, whose connection just closed without its exit path, lives on as another
  // program than the one that ran `exe` with `cmdline`: it exec'd (the client's socket is
  // close-on-exec). Where the file is the same, waits at most 20 ms for the exec to set the new
  // program's arguments, or for a dying process to go.
  static bool ExecedFrom(int pid, const std::string& cmdline, const std::string& exe);
  static std::vector<std::string> StripEmulator(std::vector<std::string> args);
  static std::string ProgramName(const std::vector<std::string>& args);

 private:
  bool DescendsFromSpawned(int pid) const;

  std::vector<int> pids_;
  std::vector<int> spawned_;
  std::vector<std::string> names_;
  bool all_;
  bool forked_children_;
  std::vector<int> accepted_;
};

}  // namespace droidheap

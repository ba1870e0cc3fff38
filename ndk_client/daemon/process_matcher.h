// Decides whether a connecting process belongs to the session, by pid or by program name as
// bionic derives it (basename of argv[0], cut at '@'). Owned by the daemon's main thread.
#pragma once

#include <string>
#include <vector>

namespace droidheap {

class ProcessMatcher {
 public:
  ProcessMatcher(std::vector<int> pids, std::vector<std::string> names, bool all)
      : pids_(std::move(pids)), names_(std::move(names)), all_(all) {}

  bool IsTarget(int pid) const;

  // /proc/pid/cmdline as a list of arguments, with a qemu-user launcher (qemu-aarch64 [options])
  // removed, so that an emulated program is known by its own name.
  static std::vector<std::string> ReadArguments(int pid);
  static std::vector<std::string> StripEmulator(std::vector<std::string> args);
  static std::string ProgramName(const std::vector<std::string>& args);

 private:
  std::vector<int> pids_;
  std::vector<std::string> names_;
  bool all_;
};

}  // namespace droidheap

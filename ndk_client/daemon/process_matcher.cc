#include "daemon/process_matcher.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "common/small_file.h"

namespace droidheap {
namespace {

// qemu-user options that take a value (qemu-user(1)); the first other word is the program.
const char* const kQemuOptionsWithValue[] = {"-L", "-E", "-U", "-cpu", "-g", "-s", "-R", "-B",
                                            "-d", "-D", "-p", "-r", "-0", "-seed", "-trace",
                                            "-plugin", "-dfilter", "-t"};

bool IsEmulatorName(const std::string& arg0) {
  size_t slash = arg0.rfind('/');
  std::string base = slash == std::string::npos ? arg0 : arg0.substr(slash + 1);
  return base.rfind("qemu-", 0) == 0;
}

struct ProcessStat {
  char state = '\0';  // '\0': no such process
  int parent = 0;     // 0: unknown
};

ProcessStat ReadStat(int pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  char stat[1024];
  ProcessStat read;
  if (ReadSmallFile(path, stat, sizeof(stat)) <= 0) return read;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so from the last ')'.
  const char* end_of_comm = strrchr(stat, ')');
  if (end_of_comm == nullptr || sscanf(end_of_comm + 1, " %c %d", &read.state, &read.parent) != 2) {
    return ProcessStat{};
  }
  return read;
}

}  // namespace

std::vector<std::string> ProcessMatcher::ReadArguments(int pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
  std::vector<std::string> args;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return args;
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 && raw.size() < 1 << 20) {
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    args.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return StripEmulator(std::move(args));
}

std::string ProcessMatcher::ReadCmdline(int pid) {
  std::string out;
  for (const auto& arg : ReadArguments(pid)) {
    if (!out.empty()) out += ' ';
    out += arg;
  }
  return out;
}

std::string ProcessMatcher::ReadExe(int pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/exe", pid);
  char target[4096];
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n <= 0) return {};
  std::string exe(target, static_cast<size_t>(n));
  // A file replaced or removed since it ran is still the program it runs.
  constexpr char kDeleted[] = " (deleted)";
  const size_t suffix = sizeof(kDeleted) - 1;
  if (exe.size() > suffix && exe.compare(exe.size() - suffix, suffix, kDeleted) == 0) {
    exe.resize(exe.size() - suffix);
  }
  return exe;
}

bool ProcessMatcher::ExecedFrom(int pid, const std::string& cmdline, const std::string& exe) {
  // The kernel names the new program's file before it closes the socket: where the exec runs
  // another file, that is the answer, however long a busy machine keeps the program from its
  // arguments. (A qemu-user program's file is qemu's, whatever it exec'd.)
  const std::string exe_now = exe.empty() ? std::string() : ReadExe(pid);
  if (!exe_now.empty() && exe_now != exe) return true;
  // Otherwise by its arguments. The kernel closes the socket between the exec's new address space
  // and its arguments (an empty cmdline for a moment), and a dying process's cmdline is empty
  // from its exit on: an empty one is asked again until the process is gone or a zombie.
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::string now = ReadCmdline(pid);
    if (!now.empty()) return now != cmdline;
    const char state = ReadStat(pid).state;
    if (state == '\0' || state == 'Z' || state == 'X') return false;
    usleep(1000);
  }
  return false;
}

std::vector<std::string> ProcessMatcher::StripEmulator(std::vector<std::string> args) {
  if (args.empty() || !IsEmulatorName(args[0])) return args;
  size_t i = 1;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-') {
    std::string option = args[i][1] == '-' ? args[i].substr(1) : args[i];
    bool takes_value =
        std::find_if(std::begin(kQemuOptionsWithValue), std::end(kQemuOptionsWithValue),
                     [&](const char* o) { return option == o; }) != std::end(kQemuOptionsWithValue);
    i += takes_value ? 2 : 1;
  }
  if (i >= args.size()) return args;
  return std::vector<std::string>(args.begin() + static_cast<long>(i), args.end());
}

std::string ProcessMatcher::ProgramName(const std::vector<std::string>& args) {
  if (args.empty()) return {};
  const std::string& arg0 = args[0];
  size_t slash = arg0.rfind('/');
  std::string base = slash == std::string::npos ? arg0 : arg0.substr(slash + 1);
  return base.substr(0, base.find('@'));
}

bool ProcessMatcher::IsTarget(int pid) const {
  if (all_) return true;
  if (std::find(pids_.begin(), pids_.end(), pid) != pids_.end()) return true;
  if (DescendsFromSpawned(pid)) return true;
  if (forked_children_ &&
      std::find(accepted_.begin(), accepted_.end(), ReadParentPid(pid)) != accepted_.end()) {
    return true;
  }
  if (names_.empty()) return false;
  std::string name = ProgramName(ReadArguments(pid));
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

bool ProcessMatcher::DescendsFromSpawned(int pid) const {
  // A process tree deeper than this, or a loop read while pids are reused, is not the session's.
  constexpr int kMaxGenerations = 64;
  for (int generation = 0; generation < kMaxGenerations && pid > 1; ++generation) {
    if (std::find(spawned_.begin(), spawned_.end(), pid) != spawned_.end()) return true;
    pid = ReadParentPid(pid);
  }
  return false;
}

int ProcessMatcher::ReadParentPid(int pid) {
  return ReadStat(pid).parent;
}

}  // namespace droidheap

#include "daemon/descendant_watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>

#include "common/numbered_entries.h"
#include "common/small_file.h"
#include "daemon/process_matcher.h"

namespace droidheap {
namespace {

// Between looks: a child list is a few small reads per process of the tree; a scan of every
// process (a kernel without child lists) costs a phone's ~1000 stat reads, and so is rarer.
constexpr uint64_t kChildListIntervalMs = 100;
constexpr uint64_t kScanIntervalMs = 1000;
// What the watch keeps at most: the programs it names, the processes one look follows (a loop,
// read while pids are reused, ends there too).
constexpr size_t kMaxPrograms = 4096;
constexpr size_t kMaxTree = 4096;

bool KernelListsChildren() {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", getpid(), getpid());
  return access(path, R_OK) == 0;
}

}  // namespace

void DescendantWatch::ReadChildren(int pid, std::vector<int>* children) {
  char dir[64];
  snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
  std::vector<int> tids;
  ListNumberedEntries(dir, &tids);
  for (int tid : tids) {
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, tid);
    char list[4096];
    if (ReadSmallFile(path, list, sizeof(list)) < 0) continue;
    for (char* p = list; *p != '\0';) {
      char* end = nullptr;
      long child = strtol(p, &end, 10);
      if (end == p) break;
      if (child > 0) children->push_back(static_cast<int>(child));
      p = end;
    }
  }
}

std::multimap<int, int> DescendantWatch::ChildrenByParent() {
  std::multimap<int, int> children;
  std::vector<int> pids;
  ListNumberedEntries("/proc", &pids);
  for (int pid : pids) {
    const int parent = ProcessMatcher::ReadParentPid(pid);
    if (parent > 0) children.emplace(parent, pid);
  }
  return children;
}

void DescendantWatch::Look(uint64_t now_ms) {
  if (next_look_ms_ == 1) children_files_ = children_files_ && KernelListsChildren();
  next_look_ms_ = now_ms + (children_files_ ? kChildListIntervalMs : kScanIntervalMs);
  std::multimap<int, int> by_parent;
  if (!children_files_) by_parent = ChildrenByParent();
  // (pid, its parent's cmdline now), breadth first from the roots.
  std::vector<std::pair<int, std::string>> queue;
  // Only the processes of this look are remembered: a tree that runs many keeps few at a time.
  std::map<int, std::string> seen;
  for (int root : roots_) queue.emplace_back(root, std::string());
  for (size_t i = 0; i < queue.size(); ++i) {
    const int pid = queue[i].first;
    const std::string cmdline = ProcessMatcher::ReadCmdline(pid);
    auto last = last_cmdline_.find(pid);
    if (i >= roots_.size() && !cmdline.empty()) {
      // A child first seen with its parent's arguments is a forked copy; one seen with others,
      // or whose arguments changed since, exec'd a program.
      const bool execed = last == last_cmdline_.end() ? cmdline != queue[i].second
                                                      : cmdline != last->second;
      if (execed) Add(pid, cmdline);
      seen[pid] = cmdline;
    } else if (last != last_cmdline_.end()) {
      seen[pid] = last->second;  // in an exec (no arguments for a moment), or exiting
    }
    std::vector<int> children;
    if (children_files_) {
      ReadChildren(pid, &children);
    } else {
      auto range = by_parent.equal_range(pid);
      for (auto it = range.first; it != range.second; ++it) children.push_back(it->second);
    }
    for (int child : children) {
      if (queue.size() < kMaxTree) queue.emplace_back(child, cmdline);
    }
  }
  last_cmdline_ = std::move(seen);
}

void DescendantWatch::Add(int pid, const std::string& cmdline) {
  if (programs_.size() >= kMaxPrograms) return;
  for (const Program& program : programs_) {
    if (program.pid == pid && program.cmdline == cmdline) return;
  }
  programs_.push_back({pid, cmdline});
}

std::vector<DescendantWatch::Program> DescendantWatch::Unconnected(
    const std::vector<int>& connected) const {
  std::vector<Program> unconnected;
  for (const Program& program : programs_) {
    if (std::find(connected.begin(), connected.end(), program.pid) == connected.end()) {
      unconnected.push_back(program);
    }
  }
  return unconnected;
}

}  // namespace droidheap

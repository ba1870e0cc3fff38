// The programs that the processes started for the session (--spawned) exec'd in their
// descendants, looked for while they run, so that the session can name those that never
// connected: a shell's or a wrapper's children that ran unprofiled (root mode loads the client
// only into programs its start property names; a static or non-allocating program never
// connects) are said, not silently missed. A descendant that lives shorter than the interval
// between looks can be missed; a forked copy that never exec'd is not listed (fork teardown).
// Owned by the daemon's main thread.
#pragma once

#include <stdint.h>

#include <map>
#include <string>
#include <vector>

namespace droidheap {

class DescendantWatch {
 public:
  // `use_child_lists` false: every process's parent is read even where the kernel lists
  // children (for tests of the other path).
  explicit DescendantWatch(std::vector<int> roots, bool use_child_lists = true)
      : roots_(std::move(roots)), children_files_(use_child_lists) {}

  // When the next look is due (on MonotonicUs() / 1000); 0 when there is nothing to watch.
  uint64_t NextLookMs() const { return roots_.empty() ? 0 : next_look_ms_; }
  // Finds the roots' descendants and the programs they run now.
  void Look(uint64_t now_ms);

  struct Program {
    int pid;
    std::string cmdline;
  };
  // What the descendants ran that `connected` does not hold, in the order seen.
  std::vector<Program> Unconnected(const std::vector<int>& connected) const;

 private:
  // The children of `pid`, from /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN).
  static void ReadChildren(int pid, std::vector<int>* children);
  // Every process's children, from every process's parent: for a kernel without child lists.
  static std::multimap<int, int> ChildrenByParent();
  // Records that `pid` ran `cmdline`, once (a pid reused for the same command is one program).
  void Add(int pid, const std::string& cmdline);

  std::vector<int> roots_;
  uint64_t next_look_ms_ = 1;  // at once
  bool children_files_ = true;  // whether the kernel lists children, known at the first look
  std::map<int, std::string> last_cmdline_;  // by pid, of the processes the last look found
  std::vector<Program> programs_;            // exec'd, in the order seen
};

}  // namespace droidheap

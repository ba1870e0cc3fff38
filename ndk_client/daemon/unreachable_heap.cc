#include "daemon/unreachable_heap.h"

namespace droidheap {

uint32_t UnreachableHeap::Rooted(uint32_t callstack, CallstackTable* callstacks) {
  auto known = rooted_.find(callstack);
  if (known != rooted_.end()) return known->second;
  MappingInfo root;
  root.path = kUnreachableRootName;
  std::vector<FrameInfo> frames;
  frames.reserve(callstacks->callstacks()[callstack].size() + 1);
  frames.push_back({callstacks->InternMapping(root), 0});
  const std::vector<FrameInfo>& stack = callstacks->callstacks()[callstack];
  frames.insert(frames.end(), stack.begin(), stack.end());
  const uint32_t rooted = callstacks->InternCallstack(frames);
  rooted_.emplace(callstack, rooted);
  return rooted;
}

void UnreachableHeap::Book(const std::vector<UnreachableSample>& found,
                           CallstackTable* callstacks) {
  // What each stack booked here now stands for: nothing, unless this sweep found it.
  std::vector<UnreachableSample> now(totals_.size());
  for (const UnreachableSample& sample : found) {
    const uint32_t rooted = Rooted(sample.callstack, callstacks);
    auto slot = slots_.emplace(rooted, static_cast<uint32_t>(totals_.size()));
    if (slot.second) {
      totals_.emplace_back().callstack = rooted;
      now.emplace_back();
    }
    now[slot.first->second].bytes += sample.bytes;
    now[slot.first->second].count += sample.count;
  }
  for (size_t i = 0; i < totals_.size(); ++i) {
    CallstackSample& t = totals_[i];
    const uint64_t bytes = t.self_allocated - t.self_freed;
    const uint64_t count = t.alloc_count - t.free_count;
    if (now[i].bytes > bytes) t.self_allocated += now[i].bytes - bytes;
    if (now[i].bytes < bytes) t.self_freed += bytes - now[i].bytes;
    if (now[i].count > count) t.alloc_count += now[i].count - count;
    if (now[i].count < count) t.free_count += count - now[i].count;
    t.peak_bytes = now[i].bytes;
    t.peak_count = now[i].count;
  }
}

std::vector<CallstackSample> UnreachableHeap::Snapshot() const { return totals_; }

}  // namespace droidheap

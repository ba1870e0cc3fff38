#include "daemon/callstack_table.h"

#include <algorithm>

namespace droidheap {

size_t CallstackTable::FramesHash::operator()(const std::vector<FrameInfo>& frames) const {
  uint64_t h = frames.size();
  for (const FrameInfo& f : frames) {
    h = (h ^ f.rel_pc ^ (uint64_t{f.mapping} << 48)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}

bool CallstackTable::FramesEqual::operator()(const std::vector<FrameInfo>& a,
                                             const std::vector<FrameInfo>& b) const {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const FrameInfo& x, const FrameInfo& y) {
                      return x.mapping == y.mapping && x.rel_pc == y.rel_pc;
                    });
}

uint32_t CallstackTable::InternCallstack(const std::vector<FrameInfo>& frames) {
  auto it = callstack_ids_.find(frames);
  if (it != callstack_ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(callstacks_.size());
  callstacks_.push_back(frames);
  callstack_ids_.emplace(frames, id);
  // The frames twice (the list, the map's key), each vector's header, a map node and its bucket.
  constexpr size_t kPerStack = 2 * sizeof(std::vector<FrameInfo>) + 4 * sizeof(void*);
  memory_bytes_ += 2 * frames.size() * sizeof(FrameInfo) + kPerStack;
  return id;
}

uint32_t CallstackTable::InternMapping(const MappingInfo& mapping) {
  // Few mappings per process, looked up once per new frame: a linear scan is enough.
  for (size_t i = 0; i < mappings_.size(); ++i) {
    if (mappings_[i] == mapping) return static_cast<uint32_t>(i);
  }
  mappings_.push_back(mapping);
  memory_bytes_ += sizeof(MappingInfo) + mapping.path.size() + mapping.build_id.size();
  return static_cast<uint32_t>(mappings_.size() - 1);
}

}  // namespace droidheap

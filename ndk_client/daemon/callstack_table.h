// The call stacks and mappings of one process, each interned once and known by its index: what
// every heap of the process books against (heap_tracker.h). Owned by the unwinding worker that
// owns the client; not thread-safe.
#pragma once

#include <stdint.h>

#include <unordered_map>
#include <vector>

#include "daemon/dump_snapshot.h"

namespace droidheap {

class CallstackTable {
 public:
  // Returns the id of an interned call stack (frames root first).
  uint32_t InternCallstack(const std::vector<FrameInfo>& frames);
  // Returns the index of an interned mapping.
  uint32_t InternMapping(const MappingInfo& mapping);

  const std::vector<MappingInfo>& mappings() const { return mappings_; }
  const std::vector<std::vector<FrameInfo>>& callstacks() const { return callstacks_; }
  // About what the tables take (for the session's memory cap).
  size_t memory_bytes() const { return memory_bytes_; }

 private:
  struct FramesHash {
    size_t operator()(const std::vector<FrameInfo>& frames) const;
  };
  struct FramesEqual {
    bool operator()(const std::vector<FrameInfo>& a, const std::vector<FrameInfo>& b) const;
  };

  std::vector<MappingInfo> mappings_;
  std::vector<std::vector<FrameInfo>> callstacks_;
  // Every sample looks its stack up here: hashed, one comparison on a hit.
  std::unordered_map<std::vector<FrameInfo>, uint32_t, FramesHash, FramesEqual> callstack_ids_;
  size_t memory_bytes_ = 0;
};

}  // namespace droidheap

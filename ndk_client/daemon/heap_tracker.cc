#include "daemon/heap_tracker.h"

#include <algorithm>

namespace droidheap {

size_t HeapTracker::FramesHash::operator()(const std::vector<FrameInfo>& frames) const {
  uint64_t h = frames.size();
  for (const FrameInfo& f : frames) {
    h = (h ^ f.rel_pc ^ (uint64_t{f.mapping} << 48)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}

bool HeapTracker::FramesEqual::operator()(const std::vector<FrameInfo>& a,
                                          const std::vector<FrameInfo>& b) const {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const FrameInfo& x, const FrameInfo& y) {
                      return x.mapping == y.mapping && x.rel_pc == y.rel_pc;
                    });
}

uint32_t HeapTracker::InternCallstack(const std::vector<FrameInfo>& frames) {
  auto it = callstack_ids_.find(frames);
  if (it != callstack_ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(callstacks_.size());
  callstacks_.push_back(frames);
  callstack_ids_.emplace(frames, id);
  CallstackSample totals;
  totals.callstack = id;
  totals_.push_back(totals);
  at_peak_.emplace_back();
  return id;
}

uint32_t HeapTracker::InternMapping(const MappingInfo& mapping) {
  // Few mappings per process, looked up once per new frame: a linear scan is enough.
  for (size_t i = 0; i < mappings_.size(); ++i) {
    if (mappings_[i] == mapping) return static_cast<uint32_t>(i);
  }
  mappings_.push_back(mapping);
  return static_cast<uint32_t>(mappings_.size() - 1);
}

void HeapTracker::BeforeChange(uint32_t callstack) {
  AtPeak& at_peak = at_peak_[callstack];
  if (at_peak.changed_at < peak_at_) {
    const CallstackSample& totals = totals_[callstack];
    at_peak.bytes = totals.self_allocated - totals.self_freed;
    at_peak.count = totals.alloc_count - totals.free_count;
  }
  at_peak.changed_at = ++change_;
}

void HeapTracker::AfterGrowth() {
  if (live_bytes_ <= peak_live_bytes_) return;
  peak_live_bytes_ = live_bytes_;
  peak_at_ = ++change_;
}

void HeapTracker::CreditFree(const LiveAllocation& live) {
  BeforeChange(live.callstack);
  CallstackSample& totals = totals_[live.callstack];
  totals.self_freed += live.size;
  totals.free_count += live.count;
  live_bytes_ -= live.size;
}

void HeapTracker::RecordAlloc(uint64_t address, uint64_t sequence, uint32_t callstack,
                              uint64_t sample_size, uint64_t count) {
  if (callstack >= totals_.size()) return;
  BeforeChange(callstack);
  CallstackSample& totals = totals_[callstack];
  totals.self_allocated += sample_size;
  totals.alloc_count += count;
  live_bytes_ += sample_size;
  const LiveAllocation incoming{sequence, callstack, sample_size, count};
  auto [live, inserted] = live_.Insert(address, incoming);
  if (!inserted) {
    if (live->sequence > sequence) {
      // A newer block already lives here: this one was freed before it, unseen by us.
      CreditFree(incoming);
    } else {
      CreditFree(*live);
      *live = incoming;
    }
  }
  AfterGrowth();
}

void HeapTracker::RecordFree(uint64_t address, uint64_t sequence) {
  LiveAllocation* live = live_.Find(address);
  if (live == nullptr || live->sequence > sequence) return;
  CreditFree(*live);
  live_.Erase(address);
}

void HeapTracker::Snapshot(DumpSnapshot* out) const {
  out->mappings = mappings_;
  out->callstacks = callstacks_;
  out->samples = totals_;
  for (CallstackSample& sample : out->samples) {
    const AtPeak& at_peak = at_peak_[sample.callstack];
    if (at_peak.changed_at < peak_at_) {  // unchanged since the peak
      sample.peak_bytes = sample.self_allocated - sample.self_freed;
      sample.peak_count = sample.alloc_count - sample.free_count;
    } else {
      sample.peak_bytes = at_peak.bytes;
      sample.peak_count = at_peak.count;
    }
  }
}

}  // namespace droidheap

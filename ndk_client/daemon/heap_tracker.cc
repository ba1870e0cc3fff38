#include "daemon/heap_tracker.h"

namespace droidheap {

uint32_t HeapTracker::SlotOf(uint32_t callstack) {
  if (callstack >= slots_.size()) slots_.resize(callstack + 1, 0);
  uint32_t& slot = slots_[callstack];
  if (slot == 0) {
    CallstackSample totals;
    totals.callstack = callstack;
    totals_.push_back(totals);
    at_peak_.emplace_back();
    slot = static_cast<uint32_t>(totals_.size());
  }
  return slot - 1;
}

void HeapTracker::BeforeChange(uint32_t slot) {
  AtPeak& at_peak = at_peak_[slot];
  if (at_peak.changed_at < peak_at_) {
    const CallstackSample& totals = totals_[slot];
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
  BeforeChange(live.callstack);  // a slot, here
  CallstackSample& totals = totals_[live.callstack];
  totals.self_freed += live.size;
  totals.free_count += live.count;
  live_bytes_ -= live.size;
}

void HeapTracker::RecordAlloc(uint64_t address, uint32_t ring, uint64_t sequence,
                              uint32_t callstack, uint64_t sample_size, uint64_t count,
                              uint64_t block_size) {
  const uint32_t slot = SlotOf(callstack);
  BeforeChange(slot);
  CallstackSample& totals = totals_[slot];
  totals.self_allocated += sample_size;
  totals.alloc_count += count;
  live_bytes_ += sample_size;
  const LiveAllocation incoming{sequence, slot, ring, sample_size, count, block_size};
  // A block's address is a multiple of 8 (a custom heap's, in ring 0, is whatever it is): its key
  // in another ring is another key.
  auto [live, inserted] = live_.Insert(address ^ ring, incoming);
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

void HeapTracker::RecordFree(uint64_t address, uint32_t ring, uint64_t sequence) {
  LiveAllocation* live = live_.Find(address ^ ring);
  if (live == nullptr || live->sequence > sequence) return;
  CreditFree(*live);
  live_.Erase(address ^ ring);
}

std::vector<LiveSample> HeapTracker::LiveSamples() const {
  std::vector<LiveSample> samples;
  samples.reserve(live_.size());
  live_.ForEach([this, &samples](uint64_t key, const LiveAllocation& live) {
    samples.push_back({{key ^ live.ring, live.block_size}, totals_[live.callstack].callstack,
                       live.size, live.count});
  });
  return samples;
}

std::vector<CallstackSample> HeapTracker::Snapshot() const {
  std::vector<CallstackSample> samples = totals_;
  for (size_t slot = 0; slot < samples.size(); ++slot) {
    CallstackSample& sample = samples[slot];
    const AtPeak& at_peak = at_peak_[slot];
    if (at_peak.changed_at < peak_at_) {  // unchanged since the peak
      sample.peak_bytes = sample.self_allocated - sample.self_freed;
      sample.peak_count = sample.alloc_count - sample.free_count;
    } else {
      sample.peak_bytes = at_peak.bytes;
      sample.peak_count = at_peak.count;
    }
  }
  return samples;
}

}  // namespace droidheap

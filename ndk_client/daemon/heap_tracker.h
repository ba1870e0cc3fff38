// Bookkeeping of one profiled process: allocations and frees per call stack, and the live
// allocations by address. Owned by the unwinding worker that owns the client; not thread-safe.
//
// Records arrive in ring-buffer order, which can differ from the order the program ran them in.
// Sequence numbers (taken by the client after a malloc returned and before a free started) settle
// every conflict at an address:
//
//   live[A] = {seq 5, stack S}     alloc A seq 9  -> S is credited a free (the block at A was
//                                                   freed and reused; that free never reached us
//                                                   or was ordered after), live[A] = seq 9
//                                  free A seq 3   -> ignored: it freed an older block at A
//                                  free A seq 7   -> S credited the free, live[A] erased
//   (nothing at A)                 free A         -> ignored: an allocation never sampled
//
// It also keeps, per call stack, the bytes and blocks in use at the moment the process's sampled
// heap was largest (heapprofd's dump_at_max), lazily: a call stack that has not changed since
// that moment still holds its value of then, so only a call stack's first change after a new peak
// copies its value aside.
#pragma once

#include <stdint.h>

#include <unordered_map>
#include <vector>

#include "daemon/dump_snapshot.h"
#include "daemon/live_allocations.h"

namespace droidheap {

class HeapTracker {
 public:
  // Returns the id of an interned call stack (frames root first).
  uint32_t InternCallstack(const std::vector<FrameInfo>& frames);
  // Returns the index of an interned mapping.
  uint32_t InternMapping(const MappingInfo& mapping);

  void RecordAlloc(uint64_t address, uint64_t sequence, uint32_t callstack, uint64_t sample_size,
                   uint64_t count);
  void RecordFree(uint64_t address, uint64_t sequence);

  // Fills mappings, callstacks and samples of `out` (every call stack ever seen: the values are
  // cumulative, as heapprofd's are).
  void Snapshot(DumpSnapshot* out) const;

  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t peak_live_bytes() const { return peak_live_bytes_; }

 private:
  struct FramesHash {
    size_t operator()(const std::vector<FrameInfo>& frames) const;
  };
  struct FramesEqual {
    bool operator()(const std::vector<FrameInfo>& a, const std::vector<FrameInfo>& b) const;
  };
  void CreditFree(const LiveAllocation& live);
  // Before `callstack`'s totals change: keeps its value at the peak when this is its first change
  // since then.
  void BeforeChange(uint32_t callstack);
  // After the live bytes grew: a new peak is now.
  void AfterGrowth();

  struct AtPeak {
    uint64_t bytes = 0;
    uint64_t count = 0;
    uint64_t changed_at = 0;  // change_ when the call stack last changed
  };

  std::vector<MappingInfo> mappings_;
  std::vector<std::vector<FrameInfo>> callstacks_;
  // Every sample looks its stack up here: hashed, one comparison on a hit.
  std::unordered_map<std::vector<FrameInfo>, uint32_t, FramesHash, FramesEqual> callstack_ids_;
  std::vector<CallstackSample> totals_;  // by callstack id
  std::vector<AtPeak> at_peak_;  // by callstack id
  LiveAllocations live_;
  uint64_t live_bytes_ = 0;
  uint64_t peak_live_bytes_ = 0;
  uint64_t change_ = 0;   // counts changes of any call stack's totals
  uint64_t peak_at_ = 0;  // change_ when the latest peak was reached; 0 = none yet
};

}  // namespace droidheap

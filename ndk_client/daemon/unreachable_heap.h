// The unreachable blocks of libc's heap as a trace shows them (--unreachable): a heap of its own,
// kUnreachableHeapName, whose "in use" is what the latest sweep found unreachable, by call stack.
//
// Two rules of Perfetto's trace processor shape it. It keeps a heap's figures by call site, not
// by heap: a stack booked in libc.malloc and here too would mix the two, so each stack is booked
// here under a root frame of its own, "[droidheap: unreachable]". And it reads a call site's
// figures as cumulative, taking differences between dumps: so what became unreachable since the
// last sweep is added to "allocated", what no longer is to "freed", and allocated - freed is what
// the latest sweep found (a block's verdict may change: a stale stack word that kept it is
// overwritten, a block is sampled at a later dump's sweep).
//
// Owned by the client's unwinding worker, on its thread.
#pragma once

#include <stdint.h>

#include <unordered_map>
#include <vector>

#include "daemon/callstack_table.h"
#include "daemon/dump_snapshot.h"

namespace droidheap {

constexpr char kUnreachableHeapName[] = "libc.malloc.unreachable";
constexpr char kUnreachableRootName[] = "[droidheap: unreachable]";

class UnreachableHeap {
 public:
  // Books a sweep's verdict (by call stack of `callstacks`) in place of the last one's.
  void Book(const std::vector<UnreachableSample>& found, CallstackTable* callstacks);
  // Each rooted call stack's figures so far. At the peak's dumps (--dump-at-max) the latest
  // verdict stands for the peak's.
  std::vector<CallstackSample> Snapshot() const;
  bool empty() const { return totals_.empty(); }
  // About what its tables take (for the session's memory cap): a hash node is some 32 bytes.
  size_t memory_bytes() const {
    return (rooted_.size() + slots_.size()) * 32 + totals_.capacity() * sizeof(CallstackSample);
  }

 private:
  uint32_t Rooted(uint32_t callstack, CallstackTable* callstacks);

  // A call stack -> the same stack under the root frame.
  std::unordered_map<uint32_t, uint32_t> rooted_;
  // A rooted stack -> its place in totals_.
  std::unordered_map<uint32_t, uint32_t> slots_;
  std::vector<CallstackSample> totals_;
};

}  // namespace droidheap

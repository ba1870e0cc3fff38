// One thread's part in the exact totals of the current session (protocol/heap_totals.h): the slot
// it counts its allocations and frees in. Thread-local, never shared; a zero-initialised one
// counts nowhere until its first Refresh.
//
// The slot is looked up again whenever the recording generation (Client::generation()) changes,
// that is when a session starts or stops: one load and compare per call otherwise. A thread gives
// its slot back when it ends (a pthread key's destructor) and then counts in the shared slot, for
// the frees that other destructors still make.
#pragma once

#include <stdint.h>

#include "client/process_identity.h"
#include "protocol/heap_totals.h"

namespace droidheap {

class ThreadTotals {
 public:
  uint32_t generation() const { return generation_; }
  // nullptr in a child that inherited the slot without an atfork handler (a raw clone()): its
  // calls are not the profiled process's. Checked where the check costs no system call.
  TotalsSlot* slot() const { return InOwnProcess() ? slot_ : nullptr; }

  // Counts in `totals` (nullptr: nowhere) of the process `identity` names from now on, as of
  // `generation`. Gives back the slot held so far. Safe to re-enter from an allocation it makes:
  // the generation is set first.
  void Refresh(uint32_t generation, SharedTotals* totals, const ProcessIdentity* identity);
  // The thread ends: its slot goes back, and it counts in the shared slot from now on.
  void EndThread();
  // In a forked child: the slot is the parent thread's (the mapping is shared); forget it without
  // giving it back.
  void ForgetInChild();

  void CountAlloc(TotalsSlot* slot, uint64_t bytes) const { CountAllocIn(slot, bytes, shared_); }
  void CountFree(TotalsSlot* slot, uint64_t bytes) const { CountFreeIn(slot, bytes, shared_); }

  // Once per process, before any Refresh: the key whose destructor calls EndThread.
  static bool CreateThreadKey();

 private:
  bool InOwnProcess() const { return identity_ == nullptr || identity_->InOriginalProcess(); }

  uint32_t generation_ = 0;
  bool shared_ = false;
  TotalsSlot* slot_ = nullptr;
  SharedTotals* totals_ = nullptr;  // where slot_ belongs
  const ProcessIdentity* identity_ = nullptr;
};

}  // namespace droidheap

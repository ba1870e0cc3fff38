#include "client/thread_totals.h"

#include <pthread.h>

namespace droidheap {
namespace {

pthread_key_t g_thread_key;

void OnThreadExit(void* totals) { static_cast<ThreadTotals*>(totals)->EndThread(); }

}  // namespace

bool ThreadTotals::CreateThreadKey() { return pthread_key_create(&g_thread_key, OnThreadExit) == 0; }

HeapCounters* ThreadTotals::FirstCustomCounters(uint32_t heap) {
  if (totals_ == nullptr || !InOwnProcess()) return nullptr;
  SharedTotals::MarkCountsCustom(slot_);
  custom_row_ = totals_->custom_row(slot_);
  return &custom_row_->heaps[heap - 1];
}

bool ThreadTotals::InOwnProcessByPid() const { return InOwnProcess(); }

void ThreadTotals::Refresh(SharedTotals* totals, const ProcessIdentity* identity,
                           bool counts_malloc, bool check_pid) {
  if (totals_ != nullptr && InOwnProcess()) totals_->Release(slot_);
  identity_ = identity != nullptr && identity->answers_without_syscall() ? identity : nullptr;
  check_pid_ = check_pid && identity_ != nullptr;
  totals_ = totals;
  slot_ = totals != nullptr ? totals->Claim() : nullptr;
  shared_ = totals != nullptr && totals->IsShared(slot_);
  custom_row_ = nullptr;
  malloc_counters_ = slot_ != nullptr && counts_malloc ? &slot_->malloc : nullptr;
  UpdateCountedMalloc();
  // Held as a pointer to this thread-local, so that the key's destructor runs at thread exit.
  // glibc may allocate here (keys past the first 32): the caller's generation ends that re-entry.
  if (slot_ != nullptr && !shared_) pthread_setspecific(g_thread_key, this);
}

void ThreadTotals::EndThread() {
  if (totals_ == nullptr || shared_ || !InOwnProcess()) return;
  totals_->Release(slot_);
  slot_ = totals_->shared_slot();
  shared_ = true;
  custom_row_ = nullptr;
  if (malloc_counters_ != nullptr) malloc_counters_ = &slot_->malloc;
  UpdateCountedMalloc();
}

void ThreadTotals::ForgetInChild() {
  totals_ = nullptr;
  slot_ = nullptr;
  malloc_counters_ = nullptr;
  shared_ = false;
  custom_row_ = nullptr;
  identity_ = nullptr;
  check_pid_ = false;
  UpdateCountedMalloc();
  pthread_setspecific(g_thread_key, nullptr);
}

}  // namespace droidheap

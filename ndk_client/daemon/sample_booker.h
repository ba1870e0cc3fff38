// Turns a client's allocation, free and heap-naming records into its bookkeeping: each sampled
// stack unwound (DwarfUnwinder over the record's stack copy and the process's memory) or found
// again (UnwoundStackCache, the stack matches published back to the client), interned and booked
// in the record's heap; frees booked; the stack log written. One per unwinding worker, on its
// thread; it owns the worker's ElfCache and unwinder.
#pragma once

#include <stdint.h>

#include <vector>

#include "daemon/client_connection.h"
#include "daemon/daemon_config.h"
#include "daemon/heap_tracker.h"
#include "unwinder/dwarf_unwinder.h"
#include "unwinder/elf_info.h"
#include "unwinder/remote_memory.h"

namespace droidheap {

class SampleBooker {
 public:
  explicit SampleBooker(const DaemonConfig& config);
  SampleBooker(const SampleBooker&) = delete;
  SampleBooker& operator=(const SampleBooker&) = delete;
  ~SampleBooker();

  // The records of `heap` read from the client's ring `ring` (ring_set.h), which keeps a block's
  // allocation and free together (heap_tracker.h).
  // False when the sample is put off, to be read again: its unwind went without files' tables that
  // the drain's time did not cover (ElfCache::SetLoadDeadline); the next round reads them.
  bool HandleAlloc(ClientConnection* client, HeapTracker* heap, uint32_t ring,
                   const uint8_t* body, size_t size);
  // A sample whose stack repeats a published entry (kRecordAllocMatched): booked to its call
  // stack.
  void HandleMatchedAlloc(ClientConnection* client, HeapTracker* heap, uint32_t ring,
                          const uint8_t* body, size_t size);
  // The custom heap a kRecordHeap* record is for (the HeapTag at its start); nullptr when the
  // client never named it.
  HeapTracker* CustomHeapOf(ClientConnection* client, const uint8_t* body, size_t size);
  void NameCustomHeap(ClientConnection* client, const uint8_t* body, size_t size);
  void HandleFree(HeapTracker* heap, uint32_t ring, const uint8_t* body, size_t size);
  // The files' tables the unwinds read (its deadline is the drain's; its bytes count against the
  // session's memory cap).
  ElfCache& elf_cache() { return elf_cache_; }

 private:
  void BookSample(ClientConnection* client, HeapTracker* heap, uint32_t ring, uint64_t address,
                  uint64_t sequence, uint32_t callstack, uint64_t sample_size,
                  uint64_t alloc_size);
  // Publishes an entry of the unwound-stack cache that a sample has just repeated to the client's
  // stack matches (protocol/stack_matches.h), unless it is there already or cannot be matched
  // there (a register the client does not capture, more words than a slot holds).
  void PublishMatch(ClientConnection* client, UnwoundStackCache::Entry* entry);
  // Takes the published entries back once the maps they were unwound with changed.
  void WithdrawStaleMatches(ClientConnection* client);
  // `regs` indexed by register number; `sequence` the sample's, for the stack log.
  // False, interning nothing, when the sample is put off (HandleAlloc).
  bool UnwindAndIntern(ClientConnection* client, uint64_t sequence, const uint64_t* regs,
                       uint64_t stack_top, StackMemory* memory, uint32_t* callstack);
  // The callstacks' mapping index for `map` (ClientConnection::kProfilerMapping for our own).
  uint32_t MappingId(ClientConnection* client, const MapEntry& map);
  void LogStack(const ClientConnection& client, uint64_t sequence, const std::vector<uint64_t>& pcs,
                UnwindError error);

  // What the worker may hold of the files its processes map: a quarter of the session's memory
  // cap shared by the workers (ElfCache's default without a cap).
  static uint64_t ElfCacheBytes(const DaemonConfig& config);

  const DaemonConfig& config_;  // the worker's, which outlives it
  ElfCache elf_cache_{ElfCacheBytes(config_)};
  DwarfUnwinder unwinder_{&elf_cache_};
  RemoteMemory remote_memory_;  // each unwind's reads of its process past the stack copy
  int stack_log_fd_ = -1;
  // HandleAlloc's scratch, kept across samples to keep their capacity.
  UnwindResult unwound_;
  std::vector<FrameInfo> frames_;
  UnwindInputs unwind_inputs_;
  std::vector<uint64_t> booked_pcs_;
};

}  // namespace droidheap

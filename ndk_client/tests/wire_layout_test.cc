// The layout of every struct two processes share (wire_protocol.h: the socket messages and the
// records; ring_buffer.h: the shared metadata; heap_totals.h: the totals' slots;
// snapshot_channel.h: the snapshot channel's messages), printed one
// field a line. A 32-bit app talks to a 64-bit daemon on a phone, so tests/unit/test_native.py
// compares the output of a 32-bit build with a 64-bit build's: they must be identical. The static_asserts next to the structs pin the
// same offsets at compile time; this catches what they do not list.
#include <stddef.h>
#include <stdio.h>

#include <atomic>

#include "protocol/heap_totals.h"
#include "protocol/ring_buffer.h"
#include "protocol/snapshot_channel.h"
#include "protocol/stack_matches.h"
#include "protocol/wire_protocol.h"
#include "tests/test_util.h"

using namespace droidheap;

#define STRUCT(type) printf("%s size=%zu align=%zu\n", #type, sizeof(type), alignof(type))
#define FIELD(type, field)                                                      \
  printf("%s.%s offset=%zu size=%zu\n", #type, #field, offsetof(type, field), \
         sizeof(static_cast<type*>(nullptr)->field))

int main() {
  STRUCT(ClientHello);
  FIELD(ClientHello, magic);
  FIELD(ClientHello, version);
  FIELD(ClientHello, size);
  FIELD(ClientHello, pid);
  FIELD(ClientHello, flags);
  FIELD(ClientHello, abi);
  FIELD(ClientHello, reserved);

  STRUCT(DaemonReply);
  FIELD(DaemonReply, magic);
  FIELD(DaemonReply, version);
  FIELD(DaemonReply, size);
  FIELD(DaemonReply, status);
  FIELD(DaemonReply, sampling_interval);
  FIELD(DaemonReply, max_stack_bytes);
  FIELD(DaemonReply, block_timeout_us);
  FIELD(DaemonReply, flags);
  FIELD(DaemonReply, reserved);
  FIELD(DaemonReply, shmem_size);
  FIELD(DaemonReply, random_seed);
  FIELD(DaemonReply, totals_size);
  FIELD(DaemonReply, heap_flags);
  FIELD(DaemonReply, heap_names);
  FIELD(DaemonReply, stack_matches_size);

  STRUCT(AllocRecord);
  FIELD(AllocRecord, sequence);
  FIELD(AllocRecord, address);
  FIELD(AllocRecord, sample_size);
  FIELD(AllocRecord, alloc_size);
  FIELD(AllocRecord, stack_pointer);
  FIELD(AllocRecord, tid);
  FIELD(AllocRecord, stack_size);

  STRUCT(MatchedAllocRecord);
  FIELD(MatchedAllocRecord, sequence);
  FIELD(MatchedAllocRecord, address);
  FIELD(MatchedAllocRecord, sample_size);
  FIELD(MatchedAllocRecord, alloc_size);
  FIELD(MatchedAllocRecord, match);
  FIELD(MatchedAllocRecord, tid);

  STRUCT(StackMatchSlot);
  FIELD(StackMatchSlot, sequence);
  FIELD(StackMatchSlot, id);
  FIELD(StackMatchSlot, stack_top);
  FIELD(StackMatchSlot, counts);
  FIELD(StackMatchSlot, register_slots);
  FIELD(StackMatchSlot, register_values);
  FIELD(StackMatchSlot, word_offsets);
  FIELD(StackMatchSlot, word_values);

  STRUCT(FreeRecord);
  FIELD(FreeRecord, sequence);
  FIELD(FreeRecord, address);

  STRUCT(HeapTag);
  FIELD(HeapTag, heap);
  FIELD(HeapTag, reserved);

  STRUCT(HeapNameRecord);
  FIELD(HeapNameRecord, heap);
  FIELD(HeapNameRecord, name);

  STRUCT(AllocatorStatsRecord);
  FIELD(AllocatorStatsRecord, in_use_bytes);
  FIELD(AllocatorStatsRecord, free_bytes);
  FIELD(AllocatorStatsRecord, system_bytes);
  STRUCT(ExitingRecord);
  FIELD(ExitingRecord, flags);
  FIELD(ExitingRecord, reserved);

  STRUCT(HeapCounters);
  FIELD(HeapCounters, alloc_count);
  FIELD(HeapCounters, alloc_bytes);
  FIELD(HeapCounters, free_count);
  FIELD(HeapCounters, free_bytes);

  STRUCT(TotalsSlot);
  FIELD(TotalsSlot, taken);
  FIELD(TotalsSlot, counts_custom);
  FIELD(TotalsSlot, malloc);

  STRUCT(CustomHeapRow);
  FIELD(CustomHeapRow, heaps);

  STRUCT(RecordHeader);
  FIELD(RecordHeader, commit);
  FIELD(RecordHeader, size);
  FIELD(RecordHeader, type);

  STRUCT(RecordHeaderV2);
  FIELD(RecordHeaderV2, size);
  FIELD(RecordHeaderV2, type);

  STRUCT(RingBufferMetadata);
  FIELD(RingBufferMetadata, version);
  FIELD(RingBufferMetadata, reserved);
  FIELD(RingBufferMetadata, data_size);
  FIELD(RingBufferMetadata, commit_key);
  FIELD(RingBufferMetadata, version2_lock);
  FIELD(RingBufferMetadata, stop_reason);
  FIELD(RingBufferMetadata, write_pos);
  FIELD(RingBufferMetadata, cached_read_pos);
  FIELD(RingBufferMetadata, records_dropped);
  FIELD(RingBufferMetadata, blocked_us);
  FIELD(RingBufferMetadata, read_pos);
  FIELD(RingBufferMetadata, reader_sleeping);

  STRUCT(SnapshotHello);
  FIELD(SnapshotHello, tid);
  FIELD(SnapshotHello, flags);
  STRUCT(SnapshotRequest);
  FIELD(SnapshotRequest, kind);
  FIELD(SnapshotRequest, id);
  STRUCT(SnapshotReady);
  FIELD(SnapshotReady, status);
  FIELD(SnapshotReady, id);
  FIELD(SnapshotReady, copy_pid);
  FIELD(SnapshotReady, error);
  FIELD(SnapshotReady, range_count);
  FIELD(SnapshotReady, profiler_ranges);
  FIELD(SnapshotReady, thread_stack);
  FIELD(SnapshotReady, probe_address);
  FIELD(SnapshotReady, probe_value);
  STRUCT(SnapshotBlocks);
  FIELD(SnapshotBlocks, count);
  FIELD(SnapshotBlocks, id);
  FIELD(SnapshotBlocks, flags);
  FIELD(SnapshotBlocks, error);
  FIELD(SnapshotBlocks, blocks);

  // Both processes must use the same instructions on the shared atomics, never a lock of their own.
  // Asked of the compiler: is_lock_free() is a call into libatomic where clang does not fold it.
  constexpr bool kLockFree =
      std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free;
  CHECK(kLockFree);
  printf("atomics lock_free=%d\n", kLockFree ? 1 : 0);
  return 0;
}

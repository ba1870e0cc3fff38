// A copy of one process's heap state at one instant, made by the unwinding worker that owns the
// process (heap_tracker.h) and handed to the main thread, which interns and writes it
// (trace_writer.h). Plain values only: once posted, nothing in it is shared.
#pragma once

#include <stdint.h>

#include <optional>
#include <string>
#include <vector>

#include "daemon/process_memory.h"
#include "protocol/heap_totals.h"
#include "protocol/wire_protocol.h"

namespace droidheap {

struct MappingInfo {
  std::string path;      // as in /proc/pid/maps ("" for anonymous memory)
  std::string build_id;  // raw bytes of NT_GNU_BUILD_ID; empty when unknown
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;     // file offset of `start`
  uint64_t elf_offset = 0;  // file offset of the ELF file's first byte (an APK's entry; else 0)
  uint64_t load_bias = 0;  // p_vaddr - p_offset of the segment mapped here
  bool operator==(const MappingInfo& o) const {
    return path == o.path && build_id == o.build_id && start == o.start && end == o.end &&
           offset == o.offset && elf_offset == o.elf_offset && load_bias == o.load_bias;
  }
};

struct FrameInfo {
  uint32_t mapping;  // index into DumpSnapshot::mappings
  uint64_t rel_pc;   // ELF virtual address: pc - start + (offset - elf_offset) + load_bias
};

struct CallstackSample {
  uint32_t callstack;  // index into DumpSnapshot::callstacks
  uint64_t self_allocated = 0;  // cumulative since the process connected
  uint64_t self_freed = 0;
  uint64_t alloc_count = 0;
  uint64_t free_count = 0;
  // In use when the process's sampled heap was at its largest so far (heapprofd's self_max).
  uint64_t peak_bytes = 0;
  uint64_t peak_count = 0;
};

// What the unreachable live blocks of one call stack stand for (scaled as CallstackSample's).
struct UnreachableSample {
  uint32_t callstack = 0;  // index into DumpSnapshot::callstacks
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// The sweep for unreachable memory of libc's heap (--unreachable, daemon/unreachable_scan.h), as
// of its latest dump; its blocks by call stack are a heap of the dump (unreachable_heap.h).
struct UnreachableReport {
  bool swept = false;     // a sweep ran; else `note` says why not
  bool complete = false;  // every live block was known (-i 1 from the process's start)
  uint64_t timestamp_ns = 0;  // when the threads were held (the dumps' clock)
  uint64_t sampled_blocks = 0;      // live sampled blocks swept
  // Blocks the allocator listed (bionic's malloc_iterate), through which pointers were followed
  // too; 0 when it did not list them.
  uint64_t listed_blocks = 0;
  uint64_t unreachable_blocks = 0;  // of them, unreachable: blocks, as they are
  uint64_t unreachable_bytes = 0;   // ... and the bytes their program asked for
  uint64_t stall_us = 0;  // the process held for its copy
  uint64_t sweep_us = 0;
  uint64_t bytes_read = 0;  // of roots and blocks
  std::string note;  // what was not scanned, or why no sweep ran; empty when all was
};

// One heap of the process: libc's (number 0, kMallocHeapName) or a custom one.
struct HeapSnapshot {
  uint32_t number = 0;
  std::string name;
  std::optional<HeapTotals> totals;  // exact; none from an older client, or without totals
  std::vector<CallstackSample> samples;  // indices into DumpSnapshot::callstacks
};

struct DumpSnapshot {
  int32_t pid = 0;
  std::string cmdline;              // NUL-separated arguments replaced by spaces
  uint64_t timestamp_ns = 0;        // CLOCK_MONOTONIC_COARSE (see trace_writer.h)
  uint64_t start_timestamp_ns = 0;  // when the process connected, on the same clock
  uint64_t sampling_interval = 0;
  bool from_startup = false;
  bool at_peak = false;  // the samples say what was in use at the peak (--dump-at-max)
  bool disconnected = false;   // the process exited or closed the connection
  bool exited = false;         // disconnected through its exit path (kRecordExiting): not lost
  bool execed = false;         // disconnected as it exec'd another program: not lost either
  bool buffer_overran = false;
  bool buffer_corrupted = false;
  bool hit_guardrail = false;  // its profile ended at the session's memory cap
  bool stalled = false;  // cut off: it kept the daemon from reading its buffer in time
  uint64_t unwinding_errors = 0;
  uint64_t heap_samples = 0;
  uint64_t matched_samples = 0;  // of heap_samples, as ClientConnection's
  uint64_t unwound_samples = 0;
  uint64_t map_reparses = 0;
  uint64_t total_unwinding_time_us = 0;
  uint64_t client_blocked_us = 0;
  ProcessMemory memory;  // at the dump; for a process gone by then, at its exit, if it said so
  std::optional<AllocatorStatsRecord> allocator;  // as the process last reported it
  bool allocator_not_read_at_exit = false;  // it exited, and `allocator` is older than that
  std::vector<MappingInfo> mappings;
  std::vector<std::vector<FrameInfo>> callstacks;  // each root (outermost caller) first
  std::vector<HeapSnapshot> heaps;  // those the session records that the process has
  UnreachableReport unreachable;  // with --unreachable
};

}  // namespace droidheap

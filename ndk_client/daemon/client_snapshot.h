// What a dump holds of one client: a copy of its bookkeeping, its figures and how its profile
// stands (plain values, dump_snapshot.h). Made by the unwinding worker that owns the client, on
// its thread; the process's memory is read here (/proc/PID/status) unless it is gone.
#pragma once

#include <stdint.h>

#include "daemon/client_connection.h"
#include "daemon/daemon_config.h"
#include "daemon/dump_snapshot.h"

namespace droidheap {

// The client's latest sweep for unreachable memory, into a dump of it: its report, and its blocks
// by call stack as a heap (which may name call stacks interned since the rest was taken: the
// tables only grow, so they are taken again when they did).
inline void AddUnreachable(const DaemonConfig& config, const ClientConnection& client,
                           DumpSnapshot* s) {
  s->unreachable = client.unreachable;
  if (!config.RecordsMalloc() || client.unreachable_heap.empty()) return;
  // Once a sweep found something (until then its absence says as much).
  HeapSnapshot* unreachable = nullptr;
  for (HeapSnapshot& heap : s->heaps) {
    if (heap.name == kUnreachableHeapName) unreachable = &heap;
  }
  if (unreachable == nullptr) {
    unreachable = &s->heaps.emplace_back();
    unreachable->name = kUnreachableHeapName;
  }
  unreachable->samples = client.unreachable_heap.Snapshot();
  if (s->callstacks.size() != client.callstacks.callstacks().size() ||
      s->mappings.size() != client.callstacks.mappings().size()) {
    s->mappings = client.callstacks.mappings();
    s->callstacks = client.callstacks.callstacks();
  }
}

inline DumpSnapshot SnapshotOf(const DaemonConfig& config, ClientConnection* client,
                               uint64_t timestamp_ns) {
  DumpSnapshot s;
  s.pid = client->pid;
  s.cmdline = client->cmdline;
  s.timestamp_ns = timestamp_ns;
  s.start_timestamp_ns = client->start_timestamp_ns;
  s.sampling_interval = config.sampling_interval;
  s.from_startup = client->from_startup;
  s.at_peak = config.dump_at_max;
  // Ring 0 says why the client stopped (Client::Shutdown). A client cut off for stalling the
  // worker: samples were lost as when its buffer overran.
  s.buffer_overran = client->rings->ring(0)->metadata()->stop_reason.load(
                         std::memory_order_relaxed) == kClientBufferOverran ||
                     client->stalled;
  s.buffer_corrupted = client->buffer_corrupted;
  s.hit_guardrail = client->hit_guardrail;
  s.stalled = client->stalled;
  s.unwinding_errors = client->unwinding_errors;
  s.heap_samples = client->heap_samples;
  s.matched_samples = client->matched_samples;
  s.unwound_samples = client->unwound_samples;
  s.map_reparses = client->map_reparses;
  s.total_unwinding_time_us = client->unwinding_time_us;
  s.client_blocked_us = 0;
  for (uint32_t i = 0; i < client->rings->count(); ++i) {
    s.client_blocked_us += client->rings->ring(i)->metadata()->blocked_us.load(
        std::memory_order_relaxed);
  }
  // A process still connected is there to be read; one gone is known only as it exited.
  s.disconnected = client->socket_closed;
  s.exited = client->socket_closed && client->exiting;
  s.execed = client->socket_closed && client->execed;
  s.memory = client->socket_closed ? client->memory_at_exit : ReadProcessMemory(client->pid);
  // Gone after its exit path, its socket not seen closed yet: known as it exited.
  if (!s.memory.known && client->exiting) s.memory = client->memory_at_exit;
  s.allocator = client->allocator;
  s.allocator_not_read_at_exit = s.exited && client->allocator_not_read_at_exit;
  s.mappings = client->callstacks.mappings();
  s.callstacks = client->callstacks.callstacks();
  if (config.RecordsMalloc()) {
    HeapSnapshot& heap = s.heaps.emplace_back();
    heap.name = kMallocHeapName;
    if (client->totals) heap.totals = client->totals->Sum();
    heap.samples = client->malloc_heap.Snapshot();
  }
  for (const auto& [number, custom] : client->custom_heaps) {
    HeapSnapshot& heap = s.heaps.emplace_back();
    heap.number = number;
    heap.name = custom.name;
    if (client->totals) heap.totals = client->totals->SumOfCustomHeap(number);
    heap.samples = custom.tracker.Snapshot();
  }
  AddUnreachable(config, *client, &s);
  return s;
}

}  // namespace droidheap

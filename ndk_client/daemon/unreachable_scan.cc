#include "daemon/unreachable_scan.h"

#include <inttypes.h>

#include <string>

#include "daemon/clock.h"
#include "daemon/log.h"
#include "reachability/root_ranges.h"

namespace droidheap {

bool TakeUnreachableSnapshot(ClientConnection* client, uint64_t timestamp_ns,
                             const std::function<uint64_t()>& mark_now) {
  if (client->snapshot != nullptr) return true;
  if (client->snapshots == nullptr || client->socket_closed) return false;
  std::string error;
  uint64_t mark = 0;
  client->snapshot = client->snapshots->Take(client->pid, *client->layout,
                                             [&mark, &mark_now] { mark = mark_now(); }, &error);
  if (client->snapshot == nullptr) {
    client->unreachable = UnreachableReport();
    client->unreachable.timestamp_ns = timestamp_ns;
    client->unreachable.note = "not swept: " + error;
    Log("warning: pid=%d: unreachable memory not looked for: %s", client->pid, error.c_str());
    return false;
  }
  client->snapshot_mark = mark;
  client->snapshot_timestamp_ns = timestamp_ns;
  return true;
}

void SweepUnreachable(const DaemonConfig& config, ClientConnection* client) {
  if (client->snapshot == nullptr || SnapshotAwaitsRecords(*client)) return;
  std::unique_ptr<ProcessSnapshot> snapshot = std::move(client->snapshot);
  UnreachableReport& report = client->unreachable;
  report = UnreachableReport();
  report.timestamp_ns = client->snapshot_timestamp_ns;
  report.stall_us = snapshot->stall_us;
  if (client->buffer_corrupted || client->hit_guardrail || client->stalled) {
    report.note = "not swept: its profile ended before the records written before the copy "
                  "were read";
    return;
  }
  const uint64_t start_us = MonotonicUs();
  // Every block is known only when every allocation was sampled from the process's start.
  report.complete = config.sampling_interval == 1 && client->from_startup;
  const std::vector<HeapBlock> blocks = client->malloc_heap.LiveBlocks();
  std::string not_scanned;
  const SweepRoots roots = RootsOf(*snapshot, blocks, report.complete, &not_scanned);
  SnapshotMemory memory(snapshot->mem_fd);
  HeapSweep sweep(blocks, client->layout->word_size);
  sweep.Run(roots, &memory);
  report.swept = true;
  report.sampled_blocks = blocks.size();
  client->unreachable_heap.Book(
      client->malloc_heap.UnreachableSamples([&sweep](size_t i) { return !sweep.reachable(i); },
                                             &report.unreachable_blocks,
                                             &report.unreachable_bytes),
      &client->callstacks);
  report.bytes_read = sweep.figures().root_bytes + sweep.figures().block_bytes;
  report.sweep_us = MonotonicUs() - start_us;
  for (const std::string& part : {snapshot->note, not_scanned}) {
    if (part.empty()) continue;
    if (!report.note.empty()) report.note += "; ";
    report.note += part;
  }
  Log("unreachable pid=%d: %" PRIu64 " of %" PRIu64 " sampled blocks (%" PRIu64
      " bytes), %s; held %" PRIu64 " us, %" PRIu64 " KiB read in %" PRIu64 " ms%s%s",
      client->pid, report.unreachable_blocks, report.sampled_blocks, report.unreachable_bytes,
      report.complete ? "every block known" : "sampled blocks", report.stall_us,
      report.bytes_read >> 10, report.sweep_us / 1000, report.note.empty() ? "" : "; ",
      report.note.c_str());
}

}  // namespace droidheap

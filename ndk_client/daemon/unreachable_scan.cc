#include "daemon/unreachable_scan.h"

#include <inttypes.h>

#include <algorithm>
#include <string>

#include "daemon/clock.h"
#include "daemon/log.h"
#include "reachability/root_ranges.h"

namespace droidheap {
namespace {

// The most blocks a copy may list: 256 MiB of the daemon's memory.
constexpr size_t kMaxListedBlocks = size_t{1} << 24;

// Every live block is a sampled one: every allocation sampled from the process's start.
bool EverySampled(const DaemonConfig& config, const ClientConnection& client) {
  return config.sampling_interval == 1 && client.from_startup;
}

// The sampled blocks, first (their verdicts are read by index), then those the allocator listed
// that no sampled block starts at.
std::vector<HeapBlock> WithListedBlocks(std::vector<HeapBlock> blocks,
                                        const std::vector<HeapBlock>& listed) {
  std::vector<uint64_t> sampled;
  sampled.reserve(blocks.size());
  for (const HeapBlock& b : blocks) sampled.push_back(b.address);
  std::sort(sampled.begin(), sampled.end());
  blocks.reserve(blocks.size() + listed.size());
  for (const HeapBlock& b : listed) {
    if (!std::binary_search(sampled.begin(), sampled.end(), b.address)) blocks.push_back(b);
  }
  return blocks;
}

}  // namespace

bool TakeUnreachableSnapshot(const DaemonConfig& config, ClientConnection* client,
                             uint64_t timestamp_ns, const std::function<uint64_t()>& mark_now) {
  if (client->snapshot != nullptr) return true;
  if (client->snapshots == nullptr || client->socket_closed) return false;
  std::string error;
  uint64_t mark = 0;
  client->snapshot = client->snapshots->Take(
      client->pid, *client->layout, [&mark, &mark_now] { mark = mark_now(); },
      /*list_blocks=*/!EverySampled(config, *client), kMaxListedBlocks, &error);
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
  // Every verdict is LeakSanitizer's only when every allocation was sampled from the process's
  // start; with the allocator's list, every sampled block's is, and pointers are followed
  // through the others too.
  report.complete = EverySampled(config, *client);
  const std::vector<HeapBlock> sampled = client->malloc_heap.LiveBlocks();
  report.listed_blocks = snapshot->blocks_listed ? snapshot->heap_blocks.size() : 0;
  const std::vector<HeapBlock> blocks =
      snapshot->blocks_listed ? WithListedBlocks(sampled, snapshot->heap_blocks) : sampled;
  snapshot->heap_blocks = std::vector<HeapBlock>();
  std::string not_scanned;
  const SweepRoots roots =
      RootsOf(*snapshot, blocks, report.complete || snapshot->blocks_listed, &not_scanned);
  SnapshotMemory memory(snapshot->mem_fd);
  HeapSweep sweep(blocks, client->layout->word_size);
  sweep.Run(roots, &memory);
  report.swept = true;
  report.sampled_blocks = sampled.size();
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
  const std::string known =
      report.complete              ? "every block known"
      : report.listed_blocks != 0 ? "sampled blocks, followed through all " +
                                        std::to_string(report.listed_blocks) + " listed"
                                  : "sampled blocks";
  Log("unreachable pid=%d: %" PRIu64 " of %" PRIu64 " sampled blocks (%" PRIu64
      " bytes), %s; held %" PRIu64 " us, %" PRIu64 " KiB read in %" PRIu64 " ms%s%s",
      client->pid, report.unreachable_blocks, report.sampled_blocks, report.unreachable_bytes,
      known.c_str(), report.stall_us,
      report.bytes_read >> 10, report.sweep_us / 1000, report.note.empty() ? "" : "; ",
      report.note.c_str());
}

}  // namespace droidheap

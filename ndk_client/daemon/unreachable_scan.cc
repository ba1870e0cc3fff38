#include "daemon/unreachable_scan.h"

#include <inttypes.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "daemon/clock.h"
#include "daemon/log.h"
#include "daemon/unreachable_sweeper.h"
#include "reachability/root_ranges.h"

namespace droidheap {
namespace {

// The most blocks a copy may list. At the sweep's peak each costs some 48 bytes of the daemon's
// memory (the list, the blocks to mark, the sweep's index), outside the session's count: 16M
// blocks, about 800 MiB; with --max-daemon-memory, what a quarter of it holds.
size_t MaxListedBlocks(const DaemonConfig& config) {
  constexpr uint64_t kBytesPerBlock = 48;
  if (config.max_memory_bytes == 0) return size_t{1} << 24;
  return static_cast<size_t>(std::max<uint64_t>(1, config.max_memory_bytes / 4 / kBytesPerBlock));
}

// Every live block is a sampled one: every allocation sampled from the process's start.
bool EverySampled(const DaemonConfig& config, const ClientConnection& client) {
  return config.sampling_interval == 1 && client.from_startup;
}

// The sampled blocks, first (their verdicts are read by index), then those the allocator listed
// that no sampled block starts at; every address untagged, as the roots' pages are found by them
// (root_ranges.h) and the allocator may list its blocks with their tags or without.
std::vector<HeapBlock> BlocksToMark(const std::vector<LiveSample>& sampled,
                                    std::vector<HeapBlock> listed, uint32_t word_size) {
  std::vector<HeapBlock> blocks;
  blocks.reserve(sampled.size() + listed.size());
  std::vector<uint64_t> addresses;
  addresses.reserve(sampled.size());
  for (const LiveSample& s : sampled) {
    blocks.push_back({UntaggedAddress(s.block.address, word_size), s.block.size});
    addresses.push_back(blocks.back().address);
  }
  std::sort(addresses.begin(), addresses.end());
  for (HeapBlock& b : listed) {
    b.address = UntaggedAddress(b.address, word_size);
    if (!std::binary_search(addresses.begin(), addresses.end(), b.address)) blocks.push_back(b);
  }
  return blocks;
}

}  // namespace

bool TakeUnreachableSnapshot(const DaemonConfig& config, ClientConnection* client,
                             uint64_t timestamp_ns) {
  if (client->snapshot != nullptr) return true;
  if (client->snapshots == nullptr || client->socket_closed) return false;
  std::string error;
  RingBytes mark{};
  client->snapshot = client->snapshots->Take(
      client->pid, *client->layout, [&mark, client] { mark = client->WrittenMark(); },
      /*list_blocks=*/!EverySampled(config, *client), MaxListedBlocks(config), &error);
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

void StartSweep(const DaemonConfig& config, ClientConnection* client,
                UnreachableSweeper* sweeper) {
  if (client->snapshot == nullptr || SnapshotAwaitsRecords(*client)) return;
  SweepJob job;
  job.snapshot = std::move(client->snapshot);
  job.report.timestamp_ns = client->snapshot_timestamp_ns;
  job.report.stall_us = job.snapshot->stall_us;
  if (client->buffer_corrupted || client->hit_guardrail || client->stalled) {
    client->unreachable = job.report;
    client->unreachable.note = "not swept: its profile ended before the records written before "
                               "the copy were read";
    return;
  }
  // Every verdict is LeakSanitizer's only when every allocation was sampled from the process's
  // start; with the allocator's list, every sampled block's is, and pointers are followed
  // through the others too.
  job.report.complete = EverySampled(config, *client);
  job.client = client;
  job.pid = client->pid;
  job.sampled = client->malloc_heap.LiveSamples();
  job.word_size = client->layout->word_size;
  ++client->sweeps_in_flight;
  sweeper->Post(std::move(job));
}

SweepOutcome Sweep(SweepJob job) {
  const uint64_t start_us = MonotonicUs();
  SweepOutcome outcome;
  outcome.client = job.client;
  UnreachableReport& report = outcome.report;
  report = job.report;
  ProcessSnapshot& snapshot = *job.snapshot;
  report.listed_blocks = snapshot.blocks_listed ? snapshot.heap_blocks.size() : 0;
  const std::vector<HeapBlock> blocks =
      BlocksToMark(job.sampled, std::move(snapshot.heap_blocks), job.word_size);
  std::string not_scanned;
  const SweepRoots roots =
      RootsOf(snapshot, blocks, report.complete || snapshot.blocks_listed, &not_scanned);
  SnapshotMemory memory(snapshot.mem_fd);
  HeapSweep sweep(blocks, job.word_size);
  sweep.Run(roots, &memory);
  report.swept = true;
  report.sampled_blocks = job.sampled.size();
  // Summed by call stack; the stacks come out in the order first met.
  std::unordered_map<uint32_t, size_t> at;
  for (size_t i = 0; i < job.sampled.size(); ++i) {
    if (sweep.reachable(i)) continue;
    const LiveSample& s = job.sampled[i];
    auto slot = at.emplace(s.callstack, outcome.found.size());
    if (slot.second) outcome.found.push_back({s.callstack, 0, 0});
    outcome.found[slot.first->second].bytes += s.bytes;
    outcome.found[slot.first->second].count += s.count;
    ++report.unreachable_blocks;
    report.unreachable_bytes += s.block.size;
  }
  report.bytes_read = sweep.figures().root_bytes + sweep.figures().block_bytes;
  report.sweep_us = MonotonicUs() - start_us;
  for (const std::string& part : {snapshot.note, not_scanned}) {
    if (part.empty()) continue;
    if (!report.note.empty()) report.note += "; ";
    report.note += part;
  }
  return outcome;
}

void BookSweep(SweepOutcome outcome, ClientConnection* client) {
  --client->sweeps_in_flight;
  const UnreachableReport& report = client->unreachable = outcome.report;
  client->unreachable_heap.Book(outcome.found, &client->callstacks);
  const std::string known =
      report.complete              ? "every block known"
      : report.listed_blocks != 0 ? "sampled blocks, followed through all " +
                                        std::to_string(report.listed_blocks) + " listed"
                                  : "sampled blocks";
  Log("unreachable pid=%d: %" PRIu64 " of %" PRIu64 " sampled blocks (%" PRIu64
      " bytes), %s; held %" PRIu64 " us, %" PRIu64 " KiB read in %" PRIu64 " ms%s%s",
      client->pid, report.unreachable_blocks, report.sampled_blocks, report.unreachable_bytes,
      known.c_str(), report.stall_us, report.bytes_read >> 10, report.sweep_us / 1000,
      report.note.empty() ? "" : "; ", report.note.c_str());
}

}  // namespace droidheap

#include "reachability/root_ranges.h"

#include <algorithm>
#include <string>

#include "reachability/populated_pages.h"

namespace droidheap {
namespace {

constexpr uint64_t kPageSize = 4096;
// Shared mappings are read whole (reading a page the program never touched may give it one):
// each up to 64 MiB, all of them up to 256 MiB.
constexpr uint64_t kMaxSharedMapping = uint64_t{64} << 20;
constexpr uint64_t kMaxSharedBytes = uint64_t{256} << 20;

using Range = std::pair<uint64_t, uint64_t>;

// Device memory (a GPU's, a camera's) is not read: reading it may be slow or act on the device.
// Android's shared memory and /dev/zero mappings are ordinary memory.
bool IsDeviceMemory(const std::string& path) {
  return path.compare(0, 5, "/dev/") == 0 && path.compare(0, 11, "/dev/ashmem") != 0 &&
         path.compare(0, 9, "/dev/zero") != 0;
}

const MapEntry* MappingOf(const std::vector<MapEntry>& maps, uint64_t address) {
  auto next = std::upper_bound(maps.begin(), maps.end(), address,
                               [](uint64_t a, const MapEntry& m) { return a < m.start; });
  if (next == maps.begin()) return nullptr;
  const MapEntry& m = *std::prev(next);
  return address < m.end ? &m : nullptr;
}

}  // namespace

SweepRoots RootsOf(const ProcessSnapshot& snapshot, const std::vector<HeapBlock>& blocks,
                   bool blocks_complete, std::string* not_scanned) {
  const std::vector<MapEntry>& maps = snapshot.maps.entries();
  std::vector<Range> excluded;
  for (const SnapshotRange& r : snapshot.profiler_ranges) excluded.emplace_back(r.start, r.end);
  if (const MapEntry* m = MappingOf(maps, snapshot.thread_stack)) {
    excluded.emplace_back(m->start, m->end);
  }
  SweepRoots roots;
  for (const ThreadStopper::Thread& thread : snapshot.threads) {
    if (!thread.stopped) continue;
    roots.words.insert(roots.words.end(), thread.registers.begin(), thread.registers.end());
    // Below the stack pointer lie dead frames: stale pointers, not the thread's.
    if (const MapEntry* m = MappingOf(maps, thread.stack_pointer)) {
      excluded.emplace_back(m->start, thread.stack_pointer);
    }
  }
  if (blocks_complete) {
    for (const HeapBlock& b : blocks) {
      const uint64_t end = b.address + std::max<uint64_t>(b.size, 1);
      if (end < b.address) continue;  // wraps: no block
      excluded.emplace_back(b.address & ~(kPageSize - 1), (end + kPageSize - 1) & ~(kPageSize - 1));
    }
  }
  std::sort(excluded.begin(), excluded.end());
  PopulatedPages populated(snapshot.pagemap_fd);
  uint64_t shared_bytes = 0;
  uint64_t skipped_bytes = 0;
  size_t skipped_mappings = 0;
  std::vector<Range> pieces;
  // Each mapping minus what is excluded; both sorted, walked once.
  size_t next = 0;
  for (const MapEntry& m : maps) {
    if (!m.readable || !m.writable || IsDeviceMemory(m.path)) continue;
    pieces.clear();
    bool known = true;
    if (!m.shared) {
      known = populated.Append(m.start, m.end, &pieces);
    } else if (m.end - m.start <= kMaxSharedMapping &&
               shared_bytes + (m.end - m.start) <= kMaxSharedBytes) {
      shared_bytes += m.end - m.start;
      pieces.emplace_back(m.start, m.end);
    } else {
      known = false;
    }
    if (!known) {
      ++skipped_mappings;
      skipped_bytes += m.end - m.start;
      continue;
    }
    while (next < excluded.size() && excluded[next].second <= m.start) ++next;
    for (const Range& piece : pieces) {
      uint64_t from = piece.first;
      for (size_t i = next; i < excluded.size() && excluded[i].first < piece.second; ++i) {
        if (excluded[i].second <= from) continue;
        if (excluded[i].first > from) roots.ranges.emplace_back(from, excluded[i].first);
        from = std::max(from, excluded[i].second);
        if (from >= piece.second) break;
      }
      if (from < piece.second) roots.ranges.emplace_back(from, piece.second);
    }
  }
  not_scanned->clear();
  if (skipped_mappings > 0) {
    *not_scanned = std::to_string(skipped_mappings) + " mappings (" +
                   std::to_string(skipped_bytes >> 20) + " MiB) not scanned: " +
                   (snapshot.pagemap_fd < 0 ? "no pagemap to tell their pages"
                                            : "shared beyond the bound, or too large to map");
  }
  return roots;
}

}  // namespace droidheap

#include "reachability/heap_sweep.h"

#include <string.h>

#include <algorithm>
#include <chrono>

namespace droidheap {

namespace {

constexpr uint64_t kUntagMask = 0x00ffffffffffffffull;
constexpr uint32_t kDropped = UINT32_MAX;
constexpr uint32_t kNone = UINT32_MAX;
constexpr uint64_t kEmptyKey = ~0ull;  // level 15: no level has it
constexpr uint32_t kGranuleShift = 12;
constexpr uint32_t kLevelStep = 6;
constexpr uint64_t kMaxSpan = 64;  // granules a block may span at its level
// One Read fetches pieces this close together: copying a few KiB costs less than a system call.
constexpr uint64_t kCoalesceGap = 4096;
constexpr uint64_t kBufferBytes = 1 << 20;

uint32_t ShiftOf(uint32_t level) { return kGranuleShift + kLevelStep * level; }

uint64_t KeyOf(uint32_t level, uint64_t address) {
  return (static_cast<uint64_t>(level) << 60) | (address >> ShiftOf(level));
}

uint64_t AlignUp(uint64_t x, uint64_t word) {
  const uint64_t up = (x + word - 1) & ~(word - 1);
  return up < x ? ~(word - 1) : up;  // past the last word: an empty piece
}

uint64_t AlignDown(uint64_t x, uint64_t word) { return x & ~(word - 1); }

// Spreads a clock reading over all 64 bits (splitmix64's finalizer).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The pieces a sweep reads come from two sources, both in ascending, disjoint, word-aligned
// pieces of at most `max` bytes. A unit (a root range, a block) is what a short read gives up on.
// Copies are cheap and independent: a group of pieces is looked at ahead, then replayed.

// The root ranges (merged, ascending) less the blocks' bytes.
struct RootPieces {
  const std::vector<std::pair<uint64_t, uint64_t>>* ranges;
  const std::vector<uint64_t>* start;
  const std::vector<uint64_t>* end;
  uint64_t word;
  size_t range = 0;
  bool in_range = false;
  uint64_t cursor = 0;
  size_t block = 0;  // the first block that ends past the cursor

  size_t unit() const { return range; }

  bool Next(uint64_t* from, uint64_t* to, uint64_t max) {
    const size_t blocks = start->size();
    while (range < ranges->size()) {
      const std::pair<uint64_t, uint64_t>& r = (*ranges)[range];
      if (!in_range) {
        cursor = r.first;
        block = std::upper_bound(end->begin(), end->end(), cursor) - end->begin();
        in_range = true;
      }
      if (cursor >= r.second) {
        ++range;
        in_range = false;
        continue;
      }
      if (block < blocks && (*start)[block] <= cursor) {
        cursor = (*end)[block++];
        continue;
      }
      const uint64_t gap_end =
          block < blocks && (*start)[block] < r.second ? (*start)[block] : r.second;
      const uint64_t a = AlignUp(cursor, word);
      const uint64_t b = AlignDown(gap_end, word);
      if (a >= b) {
        cursor = gap_end;
        continue;
      }
      *from = a;
      *to = b - a > max ? a + max : b;
      cursor = *to == b ? gap_end : *to;
      return true;
    }
    return false;
  }
};

// The blocks of a batch, by id (ascending).
struct BlockPieces {
  const std::vector<uint32_t>* ids;
  const std::vector<uint64_t>* start;
  const std::vector<uint64_t>* end;
  uint64_t word;
  size_t index;
  size_t index_end;
  bool in_block = false;
  uint64_t cursor = 0;

  size_t unit() const { return index; }

  bool Next(uint64_t* from, uint64_t* to, uint64_t max) {
    while (index < index_end) {
      const uint32_t id = (*ids)[index];
      if (!in_block) {
        cursor = AlignUp((*start)[id], word);
        in_block = true;
      }
      const uint64_t b = AlignDown((*end)[id], word);
      if (cursor >= b) {
        ++index;
        in_block = false;
        continue;
      }
      *from = cursor;
      *to = b - cursor > max ? cursor + max : b;
      cursor = *to;
      return true;
    }
    return false;
  }
};

// Passes over what is left of the current unit; returns its bytes.
template <typename Pieces>
uint64_t SkipRestOfUnit(Pieces* pieces) {
  const size_t unit = pieces->unit();
  uint64_t skipped = 0;
  uint64_t from, to;
  for (;;) {
    const Pieces before = *pieces;
    if (!pieces->Next(&from, &to, ~0ull)) break;
    if (pieces->unit() != unit) {
      *pieces = before;
      break;
    }
    skipped += to - from;
  }
  return skipped;
}

}  // namespace

HeapSweep::HeapSweep(const std::vector<HeapBlock>& blocks, uint32_t word_size)
    : word_size_(word_size == 4 ? 4 : 8), word_mask_(word_size == 4 ? 0xffffffffull : kUntagMask) {
  // Ids are 32-bit: blocks past 2^32 - 1 (64 GiB of HeapBlocks) are dropped, i.e. reachable.
  const size_t count = std::min<size_t>(blocks.size(), kDropped);
  std::vector<uint32_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = static_cast<uint32_t>(i);
  // Equal addresses keep the caller's order: the first given is kept.
  std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const uint64_t ax = UntaggedAddress(blocks[x].address, word_size_);
    const uint64_t ay = UntaggedAddress(blocks[y].address, word_size_);
    return ax != ay ? ax < ay : x < y;
  });
  id_of_.assign(blocks.size(), kDropped);
  for (uint32_t i : order) {
    const uint64_t start = UntaggedAddress(blocks[i].address, word_size_);
    const uint64_t size = std::max<uint64_t>(blocks[i].size, 1);
    const uint64_t end = start + size < start ? ~0ull : start + size;
    if (!end_.empty() && start < end_.back()) continue;
    id_of_[i] = static_cast<uint32_t>(start_.size());
    start_.push_back(start);
    end_.push_back(end);
  }
  std::vector<uint32_t>().swap(order);
  marked_.assign(start_.size(), 0);
  BuildIndex();
}

void HeapSweep::BuildIndex() {
  for (uint32_t l = 0; l < kLevels; ++l) {
    level_low_[l] = ~0ull;
    level_high_[l] = 0;
  }
  if (start_.empty()) return;
  low_ = start_.front();
  high_ = end_.back();
  // Each block's granules at its level, each granule once (a level's blocks come in address
  // order, so a granule shared by blocks of a level comes in a run).
  auto for_each_granule = [this](auto visit) {
    uint64_t previous[kLevels] = {};
    bool any[kLevels] = {};
    for (size_t id = 0; id < start_.size(); ++id) {
      const uint64_t start = start_[id], last = end_[id] - 1;
      uint32_t level = 0;
      while (level + 1 < kLevels &&
             (last >> ShiftOf(level)) - (start >> ShiftOf(level)) >= kMaxSpan) {
        ++level;
      }
      level_low_[level] = std::min(level_low_[level], start);
      level_high_[level] = std::max(level_high_[level], end_[id]);
      const uint32_t shift = ShiftOf(level);
      for (uint64_t g = start >> shift;; ++g) {
        if (!any[level] || g != previous[level]) visit(level, g, id);
        any[level] = true;
        previous[level] = g;
        if (g == last >> shift) break;
      }
    }
  };
  size_t entries = 0;
  for_each_granule([&entries](uint32_t, uint64_t, size_t) { ++entries; });
  table_bits_ = 1;
  while ((size_t{1} << table_bits_) < 2 * entries) ++table_bits_;
  table_.assign(size_t{1} << table_bits_, GranuleEntry{kEmptyKey, 0, 0});
  const uint64_t seed = static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  multiplier_ = Mix(seed ^ reinterpret_cast<uintptr_t>(this)) | 1;
  const size_t mask = table_.size() - 1;
  for_each_granule([&](uint32_t level, uint64_t g, size_t id) {
    const uint32_t shift = ShiftOf(level);
    const uint64_t g_start = g << shift;
    const uint64_t g_last = g_start | ((uint64_t{1} << shift) - 1);
    // A block covering the whole granule is all there is; otherwise search around it.
    size_t first = id, last = id;
    if (start_[id] > g_start || end_[id] - 1 < g_last) {
      first = std::upper_bound(end_.begin(), end_.begin() + id, g_start) - end_.begin();
      last = std::upper_bound(start_.begin() + id, start_.end(), g_last) - start_.begin() - 1;
    }
    const uint64_t key = (static_cast<uint64_t>(level) << 60) | g;
    size_t slot = static_cast<size_t>((key * multiplier_) >> (64 - table_bits_));
    while (table_[slot].key != kEmptyKey) slot = (slot + 1) & mask;
    table_[slot] = {key, static_cast<uint32_t>(first), static_cast<uint32_t>(last)};
  });
}

uint32_t HeapSweep::Find(uint64_t address) const {
  const size_t mask = table_.size() - 1;
  for (uint32_t level = 0; level < kLevels; ++level) {
    if (address < level_low_[level] || address >= level_high_[level]) continue;
    const uint64_t key = KeyOf(level, address);
    size_t slot = static_cast<size_t>((key * multiplier_) >> (64 - table_bits_));
    while (table_[slot].key != key) {
      if (table_[slot].key == kEmptyKey) break;
      slot = (slot + 1) & mask;
    }
    const GranuleEntry& e = table_[slot];
    if (e.key != key) continue;  // no block of this level here; a larger one may hold it
    const auto first = start_.begin() + e.first;
    const auto after = std::upper_bound(first, start_.begin() + e.last + 1, address);
    if (after == first) return kNone;
    const size_t id = static_cast<size_t>(after - start_.begin()) - 1;
    return address < end_[id] ? static_cast<uint32_t>(id) : kNone;
  }
  return kNone;
}

inline void HeapSweep::MarkWord(uint64_t word) {
  const uint64_t address = word & word_mask_;
  if (address - low_ >= high_ - low_) return;
  if (address - hit_start_ < hit_end_ - hit_start_) return;
  const uint32_t id = Find(address);
  if (id == kNone) return;
  if (!marked_[id]) {
    marked_[id] = 1;
    worklist_.push_back(id);
  }
  hit_start_ = start_[id];
  hit_end_ = end_[id];
}

template <typename Word>
void HeapSweep::ScanWords(const uint8_t* bytes, size_t size) {
  for (size_t i = 0; i + sizeof(Word) <= size; i += sizeof(Word)) {
    Word word;
    memcpy(&word, bytes + i, sizeof(word));
    MarkWord(word);
  }
}

void HeapSweep::Scan(const uint8_t* bytes, size_t size) {
  if (word_size_ == 8) {
    ScanWords<uint64_t>(bytes, size);
  } else {
    ScanWords<uint32_t>(bytes, size);
  }
}

// Reads the pieces in groups of nearby ones, one Read a group. A short read gives up on the rest
// of the unit it stopped in. The group's pieces past that are read again, one Read each: the hole
// may have been between them, and grouping them again after each short read could look at a
// group's pieces once per piece.
template <typename Pieces>
void HeapSweep::ScanPieces(Pieces pieces, uint64_t* read_bytes) {
  uint64_t from, to;
  uint64_t alone_until = 0;  // pieces that end by here are read alone
  for (;;) {
    Pieces replay = pieces;
    if (!pieces.Next(&from, &to, kBufferBytes)) return;
    const uint64_t group_start = from;
    uint64_t group_end = to;
    while (group_end > alone_until) {
      Pieces peek = pieces;
      if (!peek.Next(&from, &to, kBufferBytes) || from - group_end >= kCoalesceGap ||
          to - group_start > kBufferBytes) {
        break;
      }
      pieces = peek;
      group_end = to;
    }
    const size_t want = static_cast<size_t>(group_end - group_start);
    const size_t got = std::min(want, memory_->Read(group_start, buffer_.data(), want));
    ++figures_.reads;
    const uint64_t readable_end = group_start + got;
    if (got < want) alone_until = std::max(alone_until, group_end);
    for (bool first = true;; first = false) {
      const Pieces before = replay;
      if (!replay.Next(&from, &to, kBufferBytes) || from >= group_end) break;
      if (to <= readable_end) {
        Scan(buffer_.data() + (from - group_start), static_cast<size_t>(to - from));
        *read_bytes += to - from;
        continue;
      }
      if (!first && from >= readable_end) {
        pieces = before;
        break;
      }
      if (from < readable_end) {
        Scan(buffer_.data() + (from - group_start), static_cast<size_t>(readable_end - from));
        *read_bytes += readable_end - from;
      }
      figures_.unreadable_bytes += to - std::max(from, readable_end) + SkipRestOfUnit(&replay);
      pieces = replay;
      break;
    }
  }
}

void HeapSweep::Run(const SweepRoots& roots, MemorySource* memory) {
  if (ran_) return;
  ran_ = true;
  memory_ = memory;
  buffer_.resize(kBufferBytes);
  for (uint64_t word : roots.words) MarkWord(word);

  // Overlapping ranges would be read twice.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& r : roots.ranges) {
    if (r.first < r.second) ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end());
  size_t merged = 0;
  for (const auto& r : ranges) {
    if (merged > 0 && r.first <= ranges[merged - 1].second) {
      ranges[merged - 1].second = std::max(ranges[merged - 1].second, r.second);
    } else {
      ranges[merged++] = r;
    }
  }
  ranges.resize(merged);
  ScanPieces(RootPieces{&ranges, &start_, &end_, word_size_}, &figures_.root_bytes);

  // A batch is every block marked by the one before, read in address order so that neighbours
  // share a Read; each id enters the worklist once, so it never outgrows the blocks.
  for (size_t done = 0; done < worklist_.size();) {
    const size_t batch_end = worklist_.size();
    std::sort(worklist_.begin() + done, worklist_.end());
    ScanPieces(BlockPieces{&worklist_, &start_, &end_, word_size_, done, batch_end},
               &figures_.block_bytes);
    done = batch_end;
  }

  // Only the marks are asked for from here on.
  std::vector<uint8_t>().swap(buffer_);
  std::vector<uint32_t>().swap(worklist_);
  std::vector<GranuleEntry>().swap(table_);
  std::vector<uint64_t>().swap(start_);
  std::vector<uint64_t>().swap(end_);
  memory_ = nullptr;
}

bool HeapSweep::reachable(size_t index) const {
  if (index >= id_of_.size()) return false;
  const uint32_t id = id_of_[index];
  return id == kDropped || marked_[id] != 0;
}

}  // namespace droidheap

#include "daemon/counter_tracks.h"

#include <stdint.h>

#include <string>

namespace droidheap {
namespace {

// "dh" in the top bytes keeps clear of the uuids other producers pick at random, the pid in the
// middle, the low 16 bits free for the counters of one process.
constexpr uint64_t kUuidBase = uint64_t{0x6468} << 48;
// Counter ids: libc's heap's totals 1-4, mallinfo's 5-7, custom heap n's from 8 + 4 (n - 1), the
// sweep for unreachable memory's from 0xff00.
constexpr uint64_t kMallocTotalsId = 1;
constexpr uint64_t kMallinfoId = 5;
constexpr uint64_t kCustomTotalsId = 8;
constexpr uint64_t kUnreachableId = 0xff00;
// The instant event that says what a sweep did not scan, or why none ran, starts with this.
constexpr char kUnreachableNotePrefix[] = "unreachable memory: ";
constexpr char kAllocatorNotReadAtExit[] = "mallinfo: not read at exit";

struct Counter {
  uint64_t id;  // fixed per name: the low byte of its track's uuid
  std::string name;
  uint64_t unit;
  uint64_t value;
};

uint64_t ProcessTrackUuid(int32_t pid) {
  return kUuidBase | (uint64_t{static_cast<uint32_t>(pid)} << 16);
}

// A process profiled from its start has every block's allocation and free counted. One attached
// while it ran goes on freeing blocks allocated before: the client counts those frees too (telling
// them apart would take a set of every block allocated since, on every malloc and free), so its
// frees would be booked against allocations they do not match, and what is in use come out short,
// even negative. Its allocations since the attach are exact; its frees are written under names of
// their own, which say what they count and which nothing subtracts from the allocations.
void AddTotals(const HeapSnapshot& heap, bool from_startup, std::vector<Counter>* counters) {
  using Unit = pb::CounterDescriptor;
  if (!heap.totals) return;
  const uint64_t id =
      heap.number == 0 ? kMallocTotalsId : kCustomTotalsId + 4 * uint64_t{heap.number - 1};
  const std::string prefix = heap.name + ": ";
  const HeapTotals& t = *heap.totals;
  counters->push_back({id, prefix + "allocations", Unit::kUnitCount, t.alloc_count});
  counters->push_back({id + 1, prefix + "allocated bytes", Unit::kUnitSizeBytes, t.alloc_bytes});
  const char* const whose = from_startup ? "" : " (older blocks too)";
  counters->push_back({id + 2, prefix + "frees" + whose, Unit::kUnitCount, t.free_count});
  counters->push_back(
      {id + 3, prefix + "freed bytes" + whose, Unit::kUnitSizeBytes, t.free_bytes});
}

std::vector<Counter> CountersOf(const DumpSnapshot& process) {
  using Unit = pb::CounterDescriptor;
  std::vector<Counter> counters;
  for (const HeapSnapshot& heap : process.heaps) AddTotals(heap, process.from_startup, &counters);
  if (process.allocator) {
    const AllocatorStatsRecord& a = *process.allocator;
    const uint64_t id = kMallinfoId;
    counters.push_back({id, "mallinfo: in use bytes", Unit::kUnitSizeBytes, a.in_use_bytes});
    counters.push_back({id + 1, "mallinfo: free bytes", Unit::kUnitSizeBytes, a.free_bytes});
    counters.push_back({id + 2, "mallinfo: system bytes", Unit::kUnitSizeBytes, a.system_bytes});
  }
  // The latest sweep's own figures, of the sampled blocks as they are (its blocks by call stack,
  // scaled, are a heap of the dump: unreachable_heap.h).
  const UnreachableReport& u = process.unreachable;
  if (u.swept) {
    const uint64_t id = kUnreachableId;
    counters.push_back({id, "unreachable: blocks swept", Unit::kUnitCount, u.sampled_blocks});
    counters.push_back({id + 1, "unreachable: blocks", Unit::kUnitCount, u.unreachable_blocks});
    counters.push_back({id + 2, "unreachable: bytes", Unit::kUnitSizeBytes, u.unreachable_bytes});
    counters.push_back(
        {id + 3, "unreachable: threads held", Unit::kUnitTimeNs, u.stall_us * 1000});
    counters.push_back({id + 4, "unreachable: blocks listed", Unit::kUnitCount, u.listed_blocks});
  }
  return counters;
}

// How the profile of a process gone by `process`'s dump ended; nullptr while it is connected.
const char* EndingOf(const DumpSnapshot& process) {
  if (!process.disconnected) return nullptr;
  if (process.exited) return "process exited";
  if (process.execed) return "process exec'd";
  if (process.stalled) return "profile cut off";
  if (process.buffer_overran || process.buffer_corrupted || process.hit_guardrail) {
    return "profile ended";
  }
  return "connection lost";
}

}  // namespace

CounterPackets DumpCounters(const DumpSnapshot& process) {
  CounterPackets out;
  const std::vector<Counter> counters = CountersOf(process);
  const char* ending = EndingOf(process);
  const std::string& note = process.unreachable.note;
  const bool allocator_note = process.allocator && process.allocator_not_read_at_exit;
  if (counters.empty() && ending == nullptr && note.empty()) return out;
  const uint64_t process_uuid = ProcessTrackUuid(process.pid);
  ProtoEncoder pid;
  pid.Int32(pb::ProcessDescriptor::kPid, process.pid);
  ProtoEncoder process_track;
  process_track.Varint(pb::TrackDescriptor::kUuid, process_uuid);
  process_track.Message(pb::TrackDescriptor::kProcess, pid);
  out.descriptors.push_back(process_track);
  for (const Counter& c : counters) {
    const uint64_t uuid = process_uuid | c.id;
    ProtoEncoder counter;
    counter.Varint(pb::CounterDescriptor::kUnit, c.unit);
    ProtoEncoder track;
    track.Varint(pb::TrackDescriptor::kUuid, uuid);
    track.Varint(pb::TrackDescriptor::kParentUuid, process_uuid);
    track.Bytes(pb::TrackDescriptor::kName, c.name);
    track.Message(pb::TrackDescriptor::kCounter, counter);
    out.descriptors.push_back(track);
    ProtoEncoder event;
    event.Varint(pb::TrackEvent::kType, pb::TrackEvent::kTypeCounter);
    event.Varint(pb::TrackEvent::kTrackUuid, uuid);
    // int64 on the wire; no figure here comes near 2^63.
    event.Varint(pb::TrackEvent::kCounterValue, c.value);
    out.events.push_back(event);
  }
  for (const std::string& name : {std::string(ending == nullptr ? "" : ending),
                                  note.empty() ? "" : kUnreachableNotePrefix + note,
                                  std::string(allocator_note ? kAllocatorNotReadAtExit : "")}) {
    if (name.empty()) continue;
    ProtoEncoder event;
    event.Varint(pb::TrackEvent::kType, pb::TrackEvent::kTypeInstant);
    event.Varint(pb::TrackEvent::kTrackUuid, process_uuid);
    event.Bytes(pb::TrackEvent::kName, name);
    out.events.push_back(event);
  }
  return out;
}

}  // namespace droidheap

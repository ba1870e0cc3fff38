// Writes the daemon's output: a Perfetto trace (a `Trace` of `TracePacket`s) in heapprofd's shape,
// one packet sequence per session. Created and owned by the daemon's main thread (daemon.h); not
// thread-safe; allocates freely.
//
// The sequence, packet by packet:
//   [start]  clock_snapshot, INCREMENTAL_STATE_CLEARED, interned iid 0 = "" for the string tables
//   [dump]   clock_snapshot
//            process_tree for processes not yet described, or whose command line changed
//            process_stats; track descriptors and counter values (counter_tracks.h)
//            profile_packet index=N   continued=true  + interned_data new to the sequence  ...
//            profile_packet index=N+k continued=false + interned_data new to the sequence
//   [dump]   ...
//
// Clocks. Perfetto's trace processor converts every timestamp to the trace's clock (BOOTTIME)
// through the ClockSnapshots before it, and drops what it cannot convert:
// - TracePacket.timestamp is BOOTTIME, read when the call writes: it orders the packets (the
//   trace processor sorts by it), so it never decreases along the file, whatever the order in
//   which the workers' snapshots arrive.
// - ProcessHeapSamples.timestamp and start_timestamp are MONOTONIC_COARSE, because that is the
//   clock the trace processor reads them on (heapprofd's convention); DumpSnapshot carries them.
// - Each ClockSnapshot holds all six builtin clocks read together, as traced's do. One precedes
//   every dump, not only the first: MONOTONIC stops while the device suspends and BOOTTIME does
//   not, so an offset taken at the start would misplace every dump after a suspend.
// Interned entries (paths, build ids, mappings, frames, callstacks) are written once per sequence,
// in the packet that first uses them. Each call that writes ends with fsync, and a call that fails
// truncates the file back to where it began, so the file always ends with a complete dump; the
// interned state is then forgotten and the next dump starts the sequence over (CLEARED again).
//
// Mapping paths follow heapprofd: "/system/lib64/libc.so" is interned as "system", "lib64",
// "libc.so", which Perfetto's trace processor joins back as "/" + each component. A name that does
// not start with '/' ("[anon:scudo]", "[vdso]") is one component and reads back as "/[anon:scudo]",
// as heapprofd's do (the join cannot produce a name without a leading '/'); "" has no component and
// reads back as "". Empty components are dropped ("/a//b" reads back as "/a/b"). Build ids are
// interned as their raw bytes, as the trace processor expects; a mapping without one has build_id
// 0. exact_offset holds MappingInfo::offset, start_offset its elf_offset (see InternMapping).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/dump_snapshot.h"
#include "daemon/proto_encoder.h"

namespace droidheap {

class TraceWriter {
 public:
  TraceWriter() = default;
  ~TraceWriter() { Close(); }
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Creates `path`, which must not exist yet, following no symbolic link (output_file.h); false
  // on error.
  bool Open(const std::string& path);
  // The first packet of the sequence: clears the incremental state and snapshots the clocks.
  bool WriteSessionStart();
  // One dump of one or more processes, after a fresh clock snapshot. Flushed and fsync'ed before
  // returning.
  bool WriteDump(const std::vector<DumpSnapshot>& processes);
  // The size the trace may reach (0: no cap): a dump that would pass it is not written, and
  // full() says so from then on.
  void set_max_bytes(uint64_t max_bytes) { max_bytes_ = max_bytes; }
  bool full() const { return full_; }
  void Close();

 private:
  struct MappingLess {
    bool operator()(const MappingInfo& a, const MappingInfo& b) const;
  };
  struct FrameKey {
    uint64_t mapping_iid;
    uint64_t rel_pc;
    bool operator==(const FrameKey& o) const {
      return mapping_iid == o.mapping_iid && rel_pc == o.rel_pc;
    }
  };
  struct FrameKeyHash {
    size_t operator()(const FrameKey& k) const;
  };
  struct IidsHash {
    size_t operator()(const std::vector<uint64_t>& iids) const;
  };
  // Global iids of one snapshot's mappings and callstacks, by local index (0 = not yet interned).
  struct LocalIids {
    std::vector<uint64_t> mappings;
    std::vector<uint64_t> callstacks;
  };

  bool WriteSequenceStart();
  bool WriteClockSnapshot();
  // A packet of the sequence, stamped packet_timestamp_, with `flags` (0: none).
  ProtoEncoder NewPacket(uint64_t flags) const;
  bool WriteProcessStats(const std::vector<DumpSnapshot>& processes);
  // Exact totals and allocator figures: counter tracks (counter_tracks.h).
  bool WriteCounters(const std::vector<DumpSnapshot>& processes);
  bool WriteProcessTree(const std::vector<DumpSnapshot>& processes,
                        std::vector<int32_t>* described_now);
  bool WriteProcess(const DumpSnapshot& process);
  bool WriteHeap(const DumpSnapshot& process, const HeapSnapshot& heap, LocalIids* local);
  void CloseFragment(const DumpSnapshot& process, const HeapSnapshot& heap);
  bool FlushProfilePacket(bool continued);
  bool WritePacket(const ProtoEncoder& packet);
  bool Commit();
  void RollBack(const std::vector<int32_t>& described_now);

  // Interning: each returns the global iid, and writes the entry into `out` (an InternedData
  // body) the first time it is seen on the sequence. 0 when `index` is out of range.
  uint64_t InternCallstack(const DumpSnapshot& process, uint32_t index, LocalIids* local,
                           ProtoEncoder* out);
  uint64_t InternMapping(const DumpSnapshot& process, uint32_t index, LocalIids* local,
                         ProtoEncoder* out);
  uint64_t InternString(std::unordered_map<std::string, uint64_t>* table, uint32_t field,
                        const std::string& str, ProtoEncoder* out);
  void ForgetInternedState();

  int fd_ = -1;
  bool broken_ = false;            // a failed write could not be undone: nothing more is written
  uint64_t written_bytes_ = 0;     // where the next packet goes
  uint64_t committed_bytes_ = 0;   // end of the last complete call, fsync'ed
  uint64_t max_bytes_ = 0;
  bool full_ = false;
  bool sequence_started_ = false;  // a CLEARED packet is in the file since the last roll-back
  uint64_t next_index_ = 0;        // ProfilePacket.index; from 0 again when the sequence restarts
  uint64_t packet_timestamp_ = 0;  // BOOTTIME of the last clock snapshot: stamps every packet

  // Interned state of the sequence; iids of each table are dense from 1 (iid = size at insertion).
  std::unordered_map<std::string, uint64_t> path_iids_;
  std::unordered_map<std::string, uint64_t> build_id_iids_;
  std::map<MappingInfo, uint64_t, MappingLess> mapping_iids_;
  std::unordered_map<FrameKey, uint64_t, FrameKeyHash> frame_iids_;
  std::unordered_map<std::vector<uint64_t>, uint64_t, IidsHash> callstack_iids_;
  std::map<int32_t, std::string> described_;  // pid: the command line its process_tree said

  // The ProfilePacket being built during WriteDump.
  ProtoEncoder interned_;  // InternedData body
  ProtoEncoder dumps_;     // ProfilePacket body: the finished ProcessHeapSamples fragments
  ProtoEncoder samples_;  // HeapSamples of the current process's fragment, not yet in dumps_
};

}  // namespace droidheap

// The daemon's Perfetto trace writer (see trace_writer.h). Main thread only.
#include "daemon/trace_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <tuple>
#include <utility>

#include "daemon/clock.h"
#include "daemon/counter_tracks.h"
#include "daemon/output_file.h"

namespace droidheap {
namespace {

// Any id but 0 (no sequence) and 1 (traced's own service packets).
constexpr uint64_t kSequenceId = 2;
// A new ProfilePacket is started before one would grow past this, so packets stay well under the
// 1 MiB that Perfetto's tools are comfortable with; only a single sample whose new interned
// entries alone exceed it (thousands of frames in new mappings) makes a larger packet.
constexpr size_t kPacketBudget = 512 * 1024;

// The non-empty pieces of `s` between `separator`s.
std::vector<std::string> Split(const std::string& s, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin < s.size()) {
    size_t end = s.find(separator, begin);
    if (end == std::string::npos) end = s.size();
    if (end > begin) parts.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// "[anon:x]" is no file path (and may hold a '/'): one component.
std::vector<std::string> PathComponents(const std::string& path) {
  if (!path.empty() && path[0] != '/') return {path};
  return Split(path, '/');
}

// Every builtin clock, read back to back (a few hundred nanoseconds apart, as traced reads them),
// with BOOTTIME, the trace's clock, as the primary one. Returns the BOOTTIME reading.
uint64_t ReadClockSnapshot(ProtoEncoder* snapshot) {
  using pb::ClockSnapshot;
  const std::pair<uint64_t, clockid_t> clocks[] = {
      {ClockSnapshot::kBoottime, CLOCK_BOOTTIME},
      {ClockSnapshot::kMonotonicCoarse, CLOCK_MONOTONIC_COARSE},
      {ClockSnapshot::kMonotonic, CLOCK_MONOTONIC},
      {ClockSnapshot::kMonotonicRaw, CLOCK_MONOTONIC_RAW},
      {ClockSnapshot::kRealtime, CLOCK_REALTIME},
      {ClockSnapshot::kRealtimeCoarse, CLOCK_REALTIME_COARSE},
  };
  uint64_t boottime = 0;
  for (const auto& clock : clocks) {
    const uint64_t now = ClockNs(clock.second);
    if (clock.first == ClockSnapshot::kBoottime) boottime = now;
    ProtoEncoder entry;
    entry.Varint(ClockSnapshot::kClockId, clock.first);
    entry.Varint(ClockSnapshot::kTimestamp, now);
    snapshot->Message(ClockSnapshot::kClocks, entry);
  }
  snapshot->Varint(ClockSnapshot::kPrimaryTraceClock, ClockSnapshot::kBoottime);
  return boottime;
}

size_t Mix(size_t seed, uint64_t value) {
  return seed ^ (static_cast<size_t>(value * 0x9e3779b97f4a7c15ull) + (seed << 6) + (seed >> 2));
}

}  // namespace

bool TraceWriter::MappingLess::operator()(const MappingInfo& a, const MappingInfo& b) const {
  return std::tie(a.path, a.build_id, a.start, a.end, a.offset, a.elf_offset, a.load_bias) <
         std::tie(b.path, b.build_id, b.start, b.end, b.offset, b.elf_offset, b.load_bias);
}

size_t TraceWriter::FrameKeyHash::operator()(const FrameKey& k) const {
  return Mix(Mix(0, k.mapping_iid), k.rel_pc);
}

size_t TraceWriter::IidsHash::operator()(const std::vector<uint64_t>& iids) const {
  size_t h = iids.size();
  for (uint64_t iid : iids) h = Mix(h, iid);
  return h;
}

bool TraceWriter::Open(const std::string& path) {
  Close();
  // Never an existing file: the host names each trace anew, and whatever is already at that name
  // was put there by someone else. Its directory entry is synced too, or a crash could lose the
  // whole trace.
  fd_ = OpenOutputFile(path, O_EXCL);
  if (fd_ < 0) return false;
  broken_ = false;
  written_bytes_ = committed_bytes_ = 0;
  described_.clear();
  ForgetInternedState();
  return true;
}

void TraceWriter::Close() {
  if (fd_ < 0) return;
  close(fd_);  // every complete call already ended with fsync
  fd_ = -1;
}

bool TraceWriter::WriteSessionStart() {
  if (fd_ < 0 || broken_) return false;
  bool ok = WriteSequenceStart() && Commit();
  if (!ok) RollBack({});
  return ok;
}

bool TraceWriter::WriteDump(const std::vector<DumpSnapshot>& processes) {
  if (fd_ < 0 || broken_ || full_) return false;
  if (processes.empty()) return true;
  std::vector<int32_t> described_now;
  // A sequence (re)start carries its own clock snapshot.
  bool ok = sequence_started_ ? WriteClockSnapshot() : WriteSequenceStart();
  ok = ok && WriteProcessTree(processes, &described_now) && WriteProcessStats(processes) &&
       WriteCounters(processes);
  for (const DumpSnapshot& process : processes) ok = ok && WriteProcess(process);
  ok = ok && FlushProfilePacket(/*continued=*/false) && Commit();
  if (!ok) RollBack(described_now);
  return ok;
}

bool TraceWriter::WriteSequenceStart() {
  ProtoEncoder snapshot;
  packet_timestamp_ = ReadClockSnapshot(&snapshot);
  // The trace processor keeps ProfilePacket indexes per incremental-state generation, expecting 0
  // first and no gaps: a restarted sequence counts from 0 again.
  next_index_ = 0;

  // heapprofd's convention: iid 0 is "" in every string table, so a reader that resolves a zero
  // build id or function name id finds the empty string rather than a missing entry.
  ProtoEncoder interned;
  for (uint32_t table : {pb::InternedData::kFunctionNames, pb::InternedData::kBuildIds,
                         pb::InternedData::kMappingPaths}) {
    ProtoEncoder empty;
    empty.Varint(pb::InternedString::kIid, 0);
    empty.Bytes(pb::InternedString::kStr, "", 0);
    interned.Message(table, empty);
  }

  ProtoEncoder packet = NewPacket(pb::TracePacket::kIncrementalStateCleared);
  if (written_bytes_ == 0) packet.Bool(pb::TracePacket::kFirstPacketOnSequence, true);
  packet.Message(pb::TracePacket::kClockSnapshot, snapshot);
  packet.Message(pb::TracePacket::kInternedData, interned);
  if (!WritePacket(packet)) return false;
  sequence_started_ = true;
  return true;
}

bool TraceWriter::WriteClockSnapshot() {
  ProtoEncoder snapshot;
  packet_timestamp_ = ReadClockSnapshot(&snapshot);
  ProtoEncoder packet = NewPacket(0);
  packet.Message(pb::TracePacket::kClockSnapshot, snapshot);
  return WritePacket(packet);
}

ProtoEncoder TraceWriter::NewPacket(uint64_t flags) const {
  ProtoEncoder packet;
  packet.Varint(pb::TracePacket::kTimestamp, packet_timestamp_);
  packet.Varint(pb::TracePacket::kTrustedPacketSequenceId, kSequenceId);
  if (flags != 0) packet.Varint(pb::TracePacket::kSequenceFlags, flags);
  return packet;
}

bool TraceWriter::WriteProcessTree(const std::vector<DumpSnapshot>& processes,
                                   std::vector<int32_t>* described_now) {
  ProtoEncoder tree;
  for (const DumpSnapshot& process : processes) {
    // Described again when its command line changed: the process exec'd another program (a shell
    // running one, as `adb shell CMD` does), whose name is the one to show from now on.
    auto described = described_.find(process.pid);
    if (described != described_.end() && described->second == process.cmdline) continue;
    described_[process.pid] = process.cmdline;
    described_now->push_back(process.pid);
    ProtoEncoder entry;
    entry.Int32(pb::ProcessTree::kPid, process.pid);
    for (const std::string& arg : Split(process.cmdline, ' ')) {
      entry.Bytes(pb::ProcessTree::kCmdline, arg);
    }
    tree.Message(pb::ProcessTree::kProcesses, entry);
  }
  if (tree.empty()) return true;
  ProtoEncoder packet = NewPacket(0);
  packet.Message(pb::TracePacket::kProcessTree, tree);
  return WritePacket(packet);
}

// What the kernel says each process holds, as Perfetto's process_stats data source writes it: the
// trace processor shows it as the process's mem.rss and mem.swap counters.
bool TraceWriter::WriteProcessStats(const std::vector<DumpSnapshot>& processes) {
  using Stats = pb::ProcessMemoryStats;
  ProtoEncoder stats;
  for (const DumpSnapshot& process : processes) {
    const ProcessMemory& m = process.memory;
    if (!m.known) continue;
    ProtoEncoder entry;
    entry.Int32(Stats::kPid, process.pid);
    entry.Varint(Stats::kVmRssKb, m.rss_kb);
    entry.Varint(Stats::kRssAnonKb, m.rss_anon_kb);
    entry.Varint(Stats::kRssFileKb, m.rss_file_kb);
    entry.Varint(Stats::kRssShmemKb, m.rss_shmem_kb);
    entry.Varint(Stats::kVmSwapKb, m.swap_kb);
    entry.Varint(Stats::kVmHwmKb, m.peak_rss_kb);
    stats.Message(Stats::kProcesses, entry);
  }
  if (stats.empty()) return true;
  ProtoEncoder packet = NewPacket(0);
  packet.Message(pb::TracePacket::kProcessStats, stats);
  return WritePacket(packet);
}

bool TraceWriter::WriteCounters(const std::vector<DumpSnapshot>& processes) {
  for (const DumpSnapshot& process : processes) {
    const CounterPackets counters = DumpCounters(process);
    for (const ProtoEncoder& descriptor : counters.descriptors) {
      ProtoEncoder packet = NewPacket(0);
      packet.Message(pb::TracePacket::kTrackDescriptor, descriptor);
      if (!WritePacket(packet)) return false;
    }
    for (const ProtoEncoder& event : counters.events) {
      ProtoEncoder packet = NewPacket(0);
      packet.Message(pb::TracePacket::kTrackEvent, event);
      if (!WritePacket(packet)) return false;
    }
  }
  return true;
}

// Each heap of the process is a ProcessHeapSamples of its own, as heapprofd writes them.
bool TraceWriter::WriteProcess(const DumpSnapshot& process) {
  LocalIids local;
  local.mappings.assign(process.mappings.size(), 0);
  local.callstacks.assign(process.callstacks.size(), 0);
  for (const HeapSnapshot& heap : process.heaps) {
    if (!WriteHeap(process, heap, &local)) return false;
  }
  return true;
}

// The heap's samples go into the current ProfilePacket, each with the interned entries it is the
// first to use; when the packet is full, the heap's fragment so far is closed, the packet written
// with continued=true, and the heap goes on in a fragment of the next packet.
bool TraceWriter::WriteHeap(const DumpSnapshot& process, const HeapSnapshot& heap,
                            LocalIids* local) {
  using pb::HeapSample;
  bool wrote_fragment = false;
  ProtoEncoder staged;
  ProtoEncoder sample;
  for (const CallstackSample& s : heap.samples) {
    staged.Clear();
    uint64_t callstack_iid = InternCallstack(process, s.callstack, local, &staged);
    if (callstack_iid == 0) continue;  // an index the snapshot does not hold: nothing to point at
    sample.Clear();
    sample.Varint(HeapSample::kCallstackId, callstack_iid);
    if (process.at_peak) {  // as heapprofd's dump_at_max: the peak alone
      sample.Varint(HeapSample::kSelfMax, s.peak_bytes);
      sample.Varint(HeapSample::kSelfMaxCount, s.peak_count);
    } else {
      sample.Varint(HeapSample::kSelfAllocated, s.self_allocated);
      sample.Varint(HeapSample::kSelfFreed, s.self_freed);
      sample.Varint(HeapSample::kAllocCount, s.alloc_count);
      sample.Varint(HeapSample::kFreeCount, s.free_count);
    }
    size_t packet_bytes = interned_.size() + dumps_.size() + samples_.size();
    if (packet_bytes > 0 && packet_bytes + staged.size() + sample.size() > kPacketBudget) {
      if (!samples_.empty()) {
        CloseFragment(process, heap);
        wrote_fragment = true;
      }
      if (!FlushProfilePacket(/*continued=*/true)) return false;
    }
    interned_.Append(staged);
    samples_.Message(pb::ProcessHeapSamples::kSamples, sample);
  }
  // A heap without samples still gets its header: the process's flags and stats are news too.
  if (!samples_.empty() || !wrote_fragment) CloseFragment(process, heap);
  return true;
}

// Every fragment repeats the whole header, as heapprofd's do: a reader may see any one of them.
void TraceWriter::CloseFragment(const DumpSnapshot& process, const HeapSnapshot& heap) {
  using pb::ProcessHeapSamples;
  using pb::ProcessStats;
  ProtoEncoder stats;
  stats.Varint(ProcessStats::kUnwindingErrors, process.unwinding_errors);
  stats.Varint(ProcessStats::kHeapSamples, process.heap_samples);
  stats.Varint(ProcessStats::kMapReparses, process.map_reparses);
  stats.Varint(ProcessStats::kTotalUnwindingTimeUs, process.total_unwinding_time_us);
  stats.Varint(ProcessStats::kClientSpinlockBlockedUs, process.client_blocked_us);

  ProtoEncoder fragment;
  fragment.Varint(ProcessHeapSamples::kPid, static_cast<uint64_t>(process.pid));
  if (process.from_startup) fragment.Bool(ProcessHeapSamples::kFromStartup, true);
  if (process.disconnected) fragment.Bool(ProcessHeapSamples::kDisconnected, true);
  if (process.buffer_overran) fragment.Bool(ProcessHeapSamples::kBufferOverran, true);
  if (process.buffer_corrupted) fragment.Bool(ProcessHeapSamples::kBufferCorrupted, true);
  if (process.hit_guardrail) fragment.Bool(ProcessHeapSamples::kHitGuardrail, true);
  fragment.Varint(ProcessHeapSamples::kTimestamp, process.timestamp_ns);
  fragment.Varint(ProcessHeapSamples::kStartTimestamp, process.start_timestamp_ns);
  fragment.Bytes(ProcessHeapSamples::kHeapName, heap.name);
  fragment.Varint(ProcessHeapSamples::kSamplingIntervalBytes, process.sampling_interval);
  fragment.Message(ProcessHeapSamples::kStats, stats);
  fragment.Append(samples_);
  dumps_.Message(pb::ProfilePacket::kProcessDumps, fragment);
  samples_.Clear();
}

bool TraceWriter::FlushProfilePacket(bool continued) {
  ProtoEncoder profile;
  profile.Append(dumps_);
  if (continued) profile.Bool(pb::ProfilePacket::kContinued, true);
  profile.Varint(pb::ProfilePacket::kIndex, next_index_++);

  ProtoEncoder packet = NewPacket(pb::TracePacket::kNeedsIncrementalState);
  if (!interned_.empty()) packet.Message(pb::TracePacket::kInternedData, interned_);
  packet.Message(pb::TracePacket::kProfilePacket, profile);
  interned_.Clear();
  dumps_.Clear();
  return WritePacket(packet);
}

bool TraceWriter::WritePacket(const ProtoEncoder& packet) {
  ProtoEncoder framed;
  framed.Message(pb::Trace::kPacket, packet);
  if (max_bytes_ != 0 && written_bytes_ + framed.size() > max_bytes_) {
    full_ = true;
    return false;
  }
  const char* data = framed.data().data();
  size_t left = framed.size();
  while (left > 0) {
    ssize_t n = pwrite(fd_, data, left, static_cast<off_t>(written_bytes_));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    left -= static_cast<size_t>(n);
    written_bytes_ += static_cast<uint64_t>(n);
  }
  return true;
}

bool TraceWriter::Commit() {
  if (fsync(fd_) != 0) return false;
  committed_bytes_ = written_bytes_;
  return true;
}

// Undoes a call that failed part-way: its bytes leave the file, the pids it described are
// forgotten, and so is the interned state, since some of its entries may be among the lost bytes.
// The next dump then starts the sequence over with INCREMENTAL_STATE_CLEARED.
void TraceWriter::RollBack(const std::vector<int32_t>& described_now) {
  interned_.Clear();
  dumps_.Clear();
  samples_.Clear();
  for (int32_t pid : described_now) described_.erase(pid);
  if (written_bytes_ != committed_bytes_) {
    if (ftruncate(fd_, static_cast<off_t>(committed_bytes_)) != 0) broken_ = true;
    written_bytes_ = committed_bytes_;
  }
  ForgetInternedState();
}

void TraceWriter::ForgetInternedState() {
  sequence_started_ = false;
  path_iids_.clear();
  build_id_iids_.clear();
  mapping_iids_.clear();
  frame_iids_.clear();
  callstack_iids_.clear();
}

uint64_t TraceWriter::InternCallstack(const DumpSnapshot& process, uint32_t index,
                                      LocalIids* local, ProtoEncoder* out) {
  if (index >= process.callstacks.size()) return 0;
  if (local->callstacks[index] != 0) return local->callstacks[index];
  const std::vector<FrameInfo>& frames = process.callstacks[index];
  // Checked before anything is interned, so a rejected stack leaves no entry unwritten behind.
  for (const FrameInfo& frame : frames) {
    if (frame.mapping >= process.mappings.size()) return 0;
  }
  std::vector<uint64_t> frame_iids;
  frame_iids.reserve(frames.size());
  for (const FrameInfo& frame : frames) {
    uint64_t mapping_iid = InternMapping(process, frame.mapping, local, out);
    const FrameKey key{mapping_iid, frame.rel_pc};
    auto inserted = frame_iids_.emplace(key, frame_iids_.size() + 1);
    if (inserted.second) {
      ProtoEncoder entry;
      entry.Varint(pb::Frame::kIid, inserted.first->second);
      entry.Varint(pb::Frame::kMappingId, mapping_iid);
      entry.Varint(pb::Frame::kRelPc, frame.rel_pc);
      out->Message(pb::InternedData::kFrames, entry);
    }
    frame_iids.push_back(inserted.first->second);
  }
  auto inserted = callstack_iids_.emplace(std::move(frame_iids), callstack_iids_.size() + 1);
  if (inserted.second) {
    ProtoEncoder entry;
    entry.Varint(pb::Callstack::kIid, inserted.first->second);
    for (uint64_t frame : inserted.first->first) entry.Varint(pb::Callstack::kFrameIds, frame);
    out->Message(pb::InternedData::kCallstacks, entry);
  }
  return local->callstacks[index] = inserted.first->second;
}

// exact_offset is the mapping's file offset; start_offset, as heapprofd's libunwindstack gives it,
// that of the ELF file's first byte: 0, or where an APK stores the library. (Traces of droidheap
// before 2026-11-27 gave the mapping's offset in both; the host reads exact_offset first.)
uint64_t TraceWriter::InternMapping(const DumpSnapshot& process, uint32_t index, LocalIids* local,
                                    ProtoEncoder* out) {
  using pb::Mapping;
  if (local->mappings[index] != 0) return local->mappings[index];
  const MappingInfo& mapping = process.mappings[index];
  auto found = mapping_iids_.find(mapping);
  if (found == mapping_iids_.end()) {
    ProtoEncoder entry;
    const uint64_t iid = mapping_iids_.size() + 1;
    entry.Varint(Mapping::kIid, iid);
    if (!mapping.build_id.empty()) {
      const uint64_t build_id =
          InternString(&build_id_iids_, pb::InternedData::kBuildIds, mapping.build_id, out);
      entry.Varint(Mapping::kBuildId, build_id);
    }
    entry.Varint(Mapping::kExactOffset, mapping.offset);
    entry.Varint(Mapping::kStartOffset, mapping.elf_offset);
    entry.Varint(Mapping::kStart, mapping.start);
    entry.Varint(Mapping::kEnd, mapping.end);
    entry.Varint(Mapping::kLoadBias, mapping.load_bias);
    for (const std::string& part : PathComponents(mapping.path)) {
      entry.Varint(Mapping::kPathStringIds,
                   InternString(&path_iids_, pb::InternedData::kMappingPaths, part, out));
    }
    out->Message(pb::InternedData::kMappings, entry);
    found = mapping_iids_.emplace(mapping, iid).first;
  }
  return local->mappings[index] = found->second;
}

uint64_t TraceWriter::InternString(std::unordered_map<std::string, uint64_t>* table,
                                   uint32_t field, const std::string& str, ProtoEncoder* out) {
  auto inserted = table->emplace(str, table->size() + 1);
  if (inserted.second) {
    ProtoEncoder entry;
    entry.Varint(pb::InternedString::kIid, inserted.first->second);
    entry.Bytes(pb::InternedString::kStr, str);
    out->Message(field, entry);
  }
  return inserted.first->second;
}

}  // namespace droidheap

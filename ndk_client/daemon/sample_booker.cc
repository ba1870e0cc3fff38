#include "daemon/sample_booker.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/log.h"
#include "daemon/output_file.h"
#include "protocol/wire_protocol.h"

namespace droidheap {
namespace {

constexpr size_t kMaxFrames = 256;
// Entries published to a client's stack matches, at most: each id stays valid for the session
// (a record naming it may come long after), so a process whose call paths keep displacing each
// other in the slots stops being published to, rather than growing this without end.
constexpr size_t kMaxPublishedMatches = size_t{1} << 20;
// How much of a sample to ask the memory system for before reading it (see HandleAlloc).
constexpr size_t kPrefetchBytes = 16 * 1024;
constexpr size_t kCacheLine = 64;

// The profiler's own code on the stack: the client library, and on the emulated device the
// emulation layer standing in for libc's malloc entry points.
bool IsProfilerLibrary(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return base == "heapprofd_client.so" || base == "libdroidheap_libc.so";
}

MappingInfo PseudoMapping(const char* name) {
  MappingInfo m;
  m.path = name;
  return m;
}

MappingInfo ToMappingInfo(const MapEntry& e) {
  MappingInfo m;
  // A library inside an APK as the linker names it: "/data/app/…/base.apk!/lib/x86_64/libfoo.so".
  m.path = e.elf.entry.empty() ? e.path : e.path + "!/" + e.elf.entry;
  m.build_id = e.build_id;
  m.start = e.start;
  m.end = e.end;
  m.offset = e.offset;
  m.elf_offset = e.elf.offset;
  m.load_bias = e.load_bias;
  return m;
}

}  // namespace

SampleBooker::SampleBooker(const DaemonConfig& config) : config_(config) {
  if (!config_.stack_log_path.empty()) {
    // Shared by every worker, each appending whole lines.
    stack_log_fd_ = OpenOutputFile(config_.stack_log_path, O_APPEND);
  }
}

SampleBooker::~SampleBooker() {
  if (stack_log_fd_ >= 0) close(stack_log_fd_);
}

uint64_t SampleBooker::ElfCacheBytes(const DaemonConfig& config) {
  if (config.max_memory_bytes == 0) return ElfCache::kDefaultMaxBytes;
  constexpr uint64_t kLeast = uint64_t{16} << 20;
  return std::max(kLeast, config.max_memory_bytes / 4 / std::max(1, config.workers));
}

HeapTracker* SampleBooker::CustomHeapOf(ClientConnection* client, const uint8_t* body,
                                           size_t size) {
  if (size < sizeof(HeapTag)) return nullptr;
  HeapTag tag;
  memcpy(&tag, body, sizeof(tag));
  auto found = client->custom_heaps.find(tag.heap);
  return found != client->custom_heaps.end() ? &found->second.tracker : nullptr;
}

// A heap the session does not record, a number out of range or a heap named twice: ignored.
void SampleBooker::NameCustomHeap(ClientConnection* client, const uint8_t* body,
                                     size_t size) {
  if (size < sizeof(HeapNameRecord)) return;
  HeapNameRecord record;
  memcpy(&record, body, sizeof(record));
  const std::string name(record.name, strnlen(record.name, sizeof(record.name) - 1));
  if (record.heap == 0 || record.heap > kMaxCustomHeaps || name.empty() ||
      !config_.RecordsCustomHeap(name)) {
    return;
  }
  client->custom_heaps.emplace(record.heap, ClientConnection::CustomHeap{name, {}});
}

void SampleBooker::HandleFree(HeapTracker* heap, uint32_t ring, const uint8_t* body,
                              size_t size) {
  if (size < sizeof(FreeRecord)) return;
  FreeRecord record;
  memcpy(&record, body, sizeof(record));
  heap->RecordFree(record.address, ring, record.sequence);
}

bool SampleBooker::HandleAlloc(ClientConnection* client, HeapTracker* heap, uint32_t ring,
                               const uint8_t* body, size_t size) {
  if (size < sizeof(AllocRecord)) return true;
  // The record was just written on another core, so nearly every line of it misses the cache, and
  // the unwinder's reads depend on each other (each frame's CFA on the last one's registers): read
  // as they come, the misses would be paid one after the other. Asked for up front, they overlap.
  for (size_t offset = 0; offset < size && offset < kPrefetchBytes; offset += kCacheLine) {
    __builtin_prefetch(body + offset);
  }
  AllocRecord record;
  memcpy(&record, body, sizeof(record));
  const size_t register_bytes = AllocRecordRegisterBytes(client->version, *client->layout);
  if (size < sizeof(AllocRecord) + register_bytes ||
      record.stack_size > size - sizeof(AllocRecord) - register_bytes || record.alloc_size == 0 ||
      record.sample_size == 0) {
    return true;
  }
  uint64_t regs[kMaxRegisters];
  if (client->version >= 7) {
    uint64_t captured[kMaxRegisters];
    memcpy(captured, body + sizeof(AllocRecord), register_bytes);
    ExpandCapturedRegisters(*client->layout, captured, regs);
  } else {
    memcpy(regs, body + sizeof(AllocRecord), register_bytes);
  }
  const uint8_t* stack = body + sizeof(AllocRecord) + register_bytes;
  const uint64_t stack_top =
      UnwindStackTop(record.stack_pointer, record.stack_size, config_.max_stack_bytes);
  remote_memory_.Begin(client->mem_fd);
  StackMemory memory(record.stack_pointer, stack, record.stack_size, &remote_memory_);
  const uint64_t maps_generation = client->maps.generation();
  UnwoundStackCache::Entry* seen =
      client->stack_cache.Find(*client->layout, regs, stack_top, memory, maps_generation);
  uint32_t callstack;
  if (seen != nullptr) {
    callstack = seen->callstack;
    if (seen->error != UnwindError::kNone) ++client->unwinding_errors;
    if (stack_log_fd_ >= 0) LogStack(*client, record.sequence, seen->logged_pcs, seen->error);
    // Repeated: the client can tell the next repeat itself.
    PublishMatch(client, seen);
  } else {
    if (!UnwindAndIntern(client, record.sequence, regs, stack_top, &memory, &callstack)) {
      return false;
    }
    ++client->unwound_samples;
    WithdrawStaleMatches(client);
  }
  BookSample(client, heap, ring, record.address, record.sequence, callstack, record.sample_size,
             record.alloc_size);
  return true;
}

void SampleBooker::HandleMatchedAlloc(ClientConnection* client, HeapTracker* heap,
                                      uint32_t ring, const uint8_t* body, size_t size) {
  if (size < sizeof(MatchedAllocRecord)) return;
  MatchedAllocRecord record;
  memcpy(&record, body, sizeof(record));
  // Ids are the daemon's own: one it never published names nothing.
  if (record.match >= client->published_matches.size() || record.alloc_size == 0 ||
      record.sample_size == 0) {
    return;
  }
  const ClientConnection::PublishedMatch& match =
      client->published_matches[static_cast<size_t>(record.match)];
  if (match.error != UnwindError::kNone) ++client->unwinding_errors;
  if (stack_log_fd_ >= 0) LogStack(*client, record.sequence, match.logged_pcs, match.error);
  ++client->matched_samples;
  if (client->stack_matches != nullptr) client->stack_matches->Used(match.slot, record.match);
  BookSample(client, heap, ring, record.address, record.sequence, match.callstack,
             record.sample_size, record.alloc_size);
}

void SampleBooker::BookSample(ClientConnection* client, HeapTracker* heap, uint32_t ring,
                              uint64_t address, uint64_t sequence, uint32_t callstack,
                              uint64_t sample_size, uint64_t alloc_size) {
  // A small allocation that caught n sample points stands for interval*n bytes; credit objects the
  // same way, so that counts stay unbiased too.
  const uint64_t count =
      sample_size > alloc_size ? (sample_size + alloc_size / 2) / alloc_size : 1;
  heap->RecordAlloc(address, ring, sequence, callstack, sample_size, count, alloc_size);
  ++client->heap_samples;
}

void SampleBooker::PublishMatch(ClientConnection* client, UnwoundStackCache::Entry* entry) {
  StackMatches* matches = client->stack_matches.get();
  const bool named = entry->published != UnwoundStackCache::kNotPublished;
  if (matches == nullptr || matches->Holds(entry->sp, entry->stack_top, entry->published) ||
      (!named && client->published_matches.size() >= kMaxPublishedMatches) ||
      entry->words.size() > StackMatchSlot::kMaxWords) {
    return;
  }
  const RegisterLayout& layout = *client->layout;
  uint8_t slots[StackMatchSlot::kMaxRegisters];
  uint64_t values[StackMatchSlot::kMaxRegisters];
  size_t count = 0;
  auto add = [&](uint32_t number, uint64_t value) {
    if (number >= 64 || (layout.captured >> number & 1) == 0) return false;
    const auto slot = static_cast<uint8_t>(CapturedSlot(layout, number));
    for (size_t i = 0; i < count; ++i) {
      if (slots[i] == slot) return true;
    }
    if (count == StackMatchSlot::kMaxRegisters) return false;
    slots[count] = slot;
    values[count++] = value;
    return true;
  };
  if (!add(layout.pc, entry->pc) || !add(layout.sp, entry->sp)) return;
  for (size_t i = 0; i < entry->register_count; ++i) {
    if (!add(entry->register_numbers[i], entry->register_values[i])) return;
  }
  uint64_t addresses[StackMatchSlot::kMaxWords];
  uint64_t words[StackMatchSlot::kMaxWords];
  for (size_t i = 0; i < entry->words.size(); ++i) {
    addresses[i] = entry->words[i].address;
    words[i] = entry->words[i].value;
  }
  WithdrawStaleMatches(client);  // the entry's maps are the current ones (Find)
  // An entry published before and put out of its set since keeps its id: what the id stands for
  // is the entry's result, unchanged until the cache reuses the entry (which unnames it).
  if (!named) {
    entry->published = client->published_matches.size();
    client->published_matches.push_back({entry->callstack, entry->error, entry->logged_pcs, 0});
  }
  client->published_matches[static_cast<size_t>(entry->published)].slot =
      matches->Publish(entry->published, entry->sp, entry->stack_top, count, slots, values,
                       entry->words.size(), addresses, words);
}

void SampleBooker::WithdrawStaleMatches(ClientConnection* client) {
  if (client->stack_matches != nullptr &&
      client->stack_matches_generation != client->maps.generation()) {
    client->stack_matches->Withdraw();
    client->stack_matches_generation = client->maps.generation();
  }
}

// Unwinds a sample's stack, books its frames as a call stack and keeps the result for the samples
// whose stacks repeat it (UnwoundStackCache).
bool SampleBooker::UnwindAndIntern(ClientConnection* client, uint64_t sequence,
                                      const uint64_t* regs, uint64_t stack_top,
                                      StackMemory* memory, uint32_t* callstack) {
  UnwindResult& unwound = unwound_;  // reused: its pcs keep their capacity
  const uint64_t maps_generation = client->maps.generation();
  UnwindInputs& inputs = unwind_inputs_;
  memory->RecordReads(&inputs.words);
  unwinder_.Unwind(*client->layout, regs, stack_top, *memory, &client->maps,
                   client->maps_fd, kMaxFrames, &unwound, &inputs);
  memory->RecordReads(nullptr);
  if (unwound.maps_reloaded) ++client->map_reparses;
  // Read again once the tables it went without are read, unless that keeps failing (a stack
  // through more files than the cache holds): then booked as unwound, not kept.
  constexpr int kMaxPutOffs = 64;  // each reads one file at least
  if (elf_cache_.deferred()) {
    if (client->put_off_at != client->consumed_bytes) client->put_off_times = 0;
    client->put_off_at = client->consumed_bytes;
    if (++client->put_off_times <= kMaxPutOffs) return false;
  }

  std::vector<FrameInfo>& frames = frames_;  // innermost first while building
  frames.clear();
  std::vector<uint64_t>& booked_pcs = booked_pcs_;
  booked_pcs.clear();
  bool in_profiler = true;  // leading frames are the client's own (and the emulated libc's)
  for (size_t i = 0; i < unwound.pcs.size(); ++i) {
    const uint64_t pc = unwound.pcs[i];
    const MapEntry* map = i < unwound.maps.size() && unwound.maps[i] != nullptr
                              ? unwound.maps[i]
                              : client->maps.Find(pc, &elf_cache_);
    if (map == nullptr) {
      frames.push_back(
          {client->callstacks.InternMapping(PseudoMapping("[droidheap: unknown mapping]")), pc});
    } else {
      const uint32_t mapping = MappingId(client, *map);
      if (mapping == ClientConnection::kProfilerMapping) {
        if (in_profiler) continue;
        // The profiler's library below the app's frames (a callback into libc): booked as is.
        frames.push_back({client->callstacks.InternMapping(ToMappingInfo(*map)),
                          map->RelPc(pc)});
      } else {
        frames.push_back({mapping, map->RelPc(pc)});
      }
    }
    in_profiler = false;
    if (stack_log_fd_ >= 0) booked_pcs.push_back(pc);
  }
  if (unwound.error != UnwindError::kNone) {
    ++client->unwinding_errors;
    // Where the profile shows it; the frame's address is the UnwindError.
    frames.push_back({client->callstacks.InternMapping(PseudoMapping("[droidheap: unwind error]")),
                      static_cast<uint64_t>(unwound.error)});
  }
  if (stack_log_fd_ >= 0) LogStack(*client, sequence, booked_pcs, unwound.error);
  for (const std::string& problem : elf_cache_.TakeProblems()) {
    Log("warning: pid=%d: %s", client->pid, problem.c_str());
  }
  std::reverse(frames.begin(), frames.end());
  *callstack = client->callstacks.InternCallstack(frames);
  UnwoundStackCache::Entry* kept = client->stack_cache.Keep(
      *client->layout, regs, stack_top, maps_generation, inputs);
  if (kept != nullptr) {
    kept->callstack = *callstack;
    kept->error = unwound.error;
    kept->logged_pcs = booked_pcs;
  }
  return true;
}

// Frames of one mapping are booked by the thousand: the mapping's identity is worked out (strings
// copied and compared) once per map entry, not once per frame.
uint32_t SampleBooker::MappingId(ClientConnection* client, const MapEntry& map) {
  const std::vector<MapEntry>& entries = client->maps.entries();
  if (client->mapping_ids_generation != client->maps.generation()) {
    client->mapping_ids.assign(entries.size(), ClientConnection::kNotYetSeen);
    client->mapping_ids_generation = client->maps.generation();
  }
  uint32_t& id = client->mapping_ids[static_cast<size_t>(&map - entries.data())];
  if (id == ClientConnection::kNotYetSeen) {
    id = IsProfilerLibrary(map.path) ? ClientConnection::kProfilerMapping
                                     : client->callstacks.InternMapping(ToMappingInfo(map));
  }
  return id;
}

void SampleBooker::LogStack(const ClientConnection& client, uint64_t sequence,
                               const std::vector<uint64_t>& pcs, UnwindError error) {
  std::string line = std::to_string(client.pid) + " " + std::to_string(sequence);
  char hex[24];
  for (uint64_t pc : pcs) {
    snprintf(hex, sizeof(hex), " %" PRIx64, pc);
    line += hex;
  }
  if (error != UnwindError::kNone) line += " !" + std::to_string(static_cast<uint32_t>(error));
  line += "\n";
  // One write per line: lines from several workers never interleave (O_APPEND).
  if (write(stack_log_fd_, line.data(), line.size()) < 0) {
    close(stack_log_fd_);
    stack_log_fd_ = -1;
  }
}

}  // namespace droidheap

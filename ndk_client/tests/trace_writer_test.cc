// TraceWriter: writes the traces that tests/unit/test_trace_writer.py decodes with Perfetto's own
// protos, and checks natively what it can: packet framing, flushing after every dump, packet sizes,
// ProfilePacket indexes, packet timestamps, and the roll-back of a dump that could not be written;
// and that Open creates a new file, following no symbolic link.
//
// Usage: trace_writer_test [TRACE [RECOVERY_TRACE]] (new files; temporary ones when not given). The
// scenario here and the expectations in the Python test describe the same data: change both.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "daemon/trace_writer.h"
#include "tests/test_util.h"

using droidheap::DumpSnapshot;
using droidheap::FrameInfo;
using droidheap::MappingInfo;
using droidheap::TraceWriter;

namespace {

constexpr uint64_t kSecond = 1000000000ull;
constexpr uint64_t kT0 = 1000 * kSecond;
constexpr uint32_t kBigStacks = 50000;

MappingInfo Map(const char* path, const std::string& build_id, uint64_t start, uint64_t end,
                uint64_t offset, uint64_t load_bias, uint64_t elf_offset = 0) {
  MappingInfo m;
  m.path = path;
  m.build_id = build_id;
  m.start = start;
  m.end = end;
  m.offset = offset;
  m.elf_offset = elf_offset;
  m.load_bias = load_bias;
  return m;
}

const std::string kLibcBuildId("\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff"
                               "\x80\x00\xfe\x7f", 20);
const MappingInfo kLibc = Map("/system/lib64/libc.so", kLibcBuildId, 0x7000000000, 0x7000100000,
                              0x1000, 0x2000);
const MappingInfo kLibc2 = Map("/system/lib64/libc.so", kLibcBuildId, 0x7100000000, 0x7100100000,
                               0x1000, 0x2000);
// A library the linker maps from inside its APK: its ELF file starts at the entry's offset.
const MappingInfo kLibA = Map("/data/app/com.example.a/base.apk!/lib/arm64-v8a/liba.so", "",
                              0x7200000000, 0x7200040000, 0x5000, 0, 0x4000);
const MappingInfo kNoName = Map("", "", 0x7300000000, 0x7300001000, 0, 0);
const MappingInfo kX = Map("/usr/lib/x.so", "\xc0\xff\xee", 0x5500000000, 0x5500010000, 0x2000, 0);
const MappingInfo kScudo = Map("[anon:scudo:primary]", "", 0x7400000000, 0x7400100000, 0, 0);
const MappingInfo kBig = Map("/system/bin/big", "", 0x6000000000, 0x6100000000, 0, 0);

void AddSample(DumpSnapshot* d, uint32_t callstack, uint64_t allocated, uint64_t freed,
               uint64_t allocs, uint64_t frees) {
  droidheap::CallstackSample s;
  s.callstack = callstack;
  s.self_allocated = allocated;
  s.self_freed = freed;
  s.alloc_count = allocs;
  s.free_count = frees;
  if (d->heaps.empty()) d->heaps.emplace_back().name = droidheap::kMallocHeapName;
  d->heaps.back().samples.push_back(s);
}

constexpr char kExecdCmdline[] = "/system/bin/app_process64 com.example.b";

// pid 101 as of dump 1 (`factor` 1) or dumps 2 and 3 (`factor` 2, mappings listed in reverse so
// its local indexes differ, one more callstack, disconnected).
DumpSnapshot AppA(uint64_t timestamp, uint64_t factor) {
  DumpSnapshot d;
  d.pid = 101;
  d.cmdline = "com.example.a --mode  fast";
  d.timestamp_ns = timestamp;
  d.start_timestamp_ns = kT0;
  d.sampling_interval = 4096;
  d.disconnected = factor > 1;
  d.unwinding_errors = 1;
  d.heap_samples = 2;
  d.map_reparses = 3;
  d.total_unwinding_time_us = 4;
  d.client_blocked_us = 5;
  const bool reversed = factor > 1;
  d.mappings = reversed ? std::vector<MappingInfo>{kNoName, kLibA, kLibc}
                        : std::vector<MappingInfo>{kLibc, kLibA, kNoName};
  const uint32_t libc = reversed ? 2 : 0, liba = 1, noname = reversed ? 0 : 2;
  std::vector<FrameInfo> deep;
  for (uint32_t i = 0; i < 200; ++i) deep.push_back({i % 2 ? liba : libc, 0x1000 + 4 * i});
  d.callstacks = {
      {{libc, 0x100}, {liba, 0x200}, {liba, 0x300}},
      {{libc, 0x100}, {liba, 0x210}},
      deep,
      {{noname, 0x10}},
      {{libc, 0x100}},
      {{liba, 0x999}},  // no sample points at it
  };
  for (uint32_t c = 0; c < 5; ++c) {
    AddSample(&d, c, factor * 1000 * (c + 1), factor * 100 * c, factor * (10 + c), factor * c);
  }
  if (factor > 1) {
    d.callstacks.push_back({{libc, 0x100}, {liba, 0x200}, {liba, 0x300}, {liba, 0x400}});
    AddSample(&d, 6, 777, 0, 7, 0);
  }
  return d;
}

DumpSnapshot XDaemon() {
  DumpSnapshot d;
  d.pid = 202;
  d.cmdline = "/usr/bin/x-daemon";
  d.timestamp_ns = kT0 + kSecond;
  d.start_timestamp_ns = kT0 + kSecond / 2;
  d.sampling_interval = 8192;
  d.from_startup = true;
  d.buffer_overran = true;
  d.buffer_corrupted = true;
  d.unwinding_errors = 6;
  d.heap_samples = 7;
  d.map_reparses = 8;
  d.total_unwinding_time_us = 9;
  d.client_blocked_us = 10;
  d.mappings = {kX, kScudo, kLibc, kLibc2};
  d.callstacks = {{{2, 0x100}, {0, 0x40}}, {{2, 0x100}, {1, 0x8}}, {{3, 0x100}}, {{2, 0x100}}};
  for (uint32_t c = 4; c-- > 0;) AddSample(&d, c, 2000 + c, 0, 1, 0);
  return d;
}

DumpSnapshot Big(int32_t pid, uint32_t stacks, uint64_t timestamp) {
  DumpSnapshot d;
  d.pid = pid;
  d.cmdline = "big";
  d.timestamp_ns = timestamp;
  d.start_timestamp_ns = timestamp - kSecond / 2;
  d.sampling_interval = 512;
  d.mappings = {kLibc, kBig};
  for (uint32_t i = 0; i < stacks; ++i) {
    d.callstacks.push_back({{0, 0x100}, {1, 4ull * i}});
    AddSample(&d, i, i + 1, i % 2 ? i + 1 : 0, 1, i % 2);
  }
  return d;
}

// A reader for what the writer emits (varints and length-delimited fields only).
struct Field {
  uint32_t id = 0;
  uint64_t value = 0;  // varint value, or length
  const uint8_t* data = nullptr;
};

bool ReadVarint(const uint8_t** p, const uint8_t* end, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t byte = *(*p)++;
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

bool ReadField(const uint8_t** p, const uint8_t* end, Field* f) {
  uint64_t tag;
  if (!ReadVarint(p, end, &tag) || !ReadVarint(p, end, &f->value)) return false;
  f->id = static_cast<uint32_t>(tag >> 3);
  if ((tag & 7) == 0) return true;
  if ((tag & 7) != 2 || f->value > static_cast<uint64_t>(end - *p)) return false;
  f->data = *p;
  *p += f->value;
  return true;
}

struct PacketSummary {
  uint64_t sequence_id = 0;
  uint64_t timestamp = 0;
  uint64_t flags = 0;
  bool profile = false;
  uint64_t index = 0;
  bool continued = false;
};

// Decodes the whole file; fails the test unless it is a sequence of complete packets.
std::vector<PacketSummary> Packets(const std::string& path) {
  const std::string bytes = ReadWholeFile(path);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t* end = p + bytes.size();
  std::vector<PacketSummary> packets;
  while (p < end) {
    Field packet;
    CHECK(ReadField(&p, end, &packet) && packet.id == 1 && packet.data != nullptr);
    CHECK(packet.value < 1024 * 1024);
    PacketSummary summary;
    const uint8_t* q = packet.data;
    Field f;
    while (q < packet.data + packet.value) {
      CHECK(ReadField(&q, packet.data + packet.value, &f));
      if (f.id == 8) summary.timestamp = f.value;
      if (f.id == 10) summary.sequence_id = f.value;
      if (f.id == 13) summary.flags = f.value;
      if (f.id != 37) continue;
      summary.profile = true;
      const uint8_t* r = f.data;
      Field g;
      while (r < f.data + f.value) {
        CHECK(ReadField(&r, f.data + f.value, &g));
        if (g.id == 6) summary.continued = g.value != 0;
        if (g.id == 7) summary.index = g.value;
      }
    }
    packets.push_back(summary);
  }
  return packets;
}

// Indexes count ProfilePackets from 0 after each INCREMENTAL_STATE_CLEARED, and packet timestamps
// never decrease (the trace processor sorts by them); returns the number of complete dumps.
size_t CheckProfilePackets(const std::vector<PacketSummary>& packets) {
  uint64_t next_index = 0;
  size_t dumps = 0;
  uint64_t last_timestamp = 0;
  for (const PacketSummary& s : packets) {
    CHECK(s.sequence_id != 0 && s.sequence_id == packets.front().sequence_id);
    CHECK(s.timestamp != 0 && s.timestamp >= last_timestamp);
    last_timestamp = s.timestamp;
    if (s.flags & 1) next_index = 0;
    if (!s.profile) continue;
    CHECK(s.index == next_index++);
    if (!s.continued) ++dumps;
  }
  return dumps;
}

void WriteMainTrace(const std::string& path) {
  TraceWriter writer;
  CHECK(!writer.WriteDump({AppA(kT0, 1)}));  // not open
  CHECK(writer.Open(path));
  CHECK(writer.WriteSessionStart());
  CHECK(Packets(path).size() == 1);

  CHECK(writer.WriteDump({AppA(kT0 + kSecond, 1), XDaemon()}));
  CHECK(CheckProfilePackets(Packets(path)) == 1);  // on disk already, before Close
  CHECK(writer.WriteDump({AppA(kT0 + 2 * kSecond, 2)}));
  CHECK(CheckProfilePackets(Packets(path)) == 2);
  // pid 101 exec'd another program (as a shell running a command does): described again.
  DumpSnapshot execd = AppA(kT0 + 3 * kSecond, 2);
  execd.cmdline = kExecdCmdline;
  CHECK(writer.WriteDump({Big(303, kBigStacks, kT0 + 3 * kSecond), execd}));
  writer.Close();

  std::vector<PacketSummary> packets = Packets(path);
  CHECK(CheckProfilePackets(packets) == 3);
  size_t last_dump_packets = 0;
  for (size_t i = packets.size(); i-- > 0 && packets[i].profile;) ++last_dump_packets;
  CHECK(last_dump_packets >= 3);
  CHECK(packets.front().flags == 1);
}

// A dump that fails part-way leaves the file as it was; the next one restarts the sequence.
void WriteRecoveryTrace(const std::string& path) {
  TraceWriter writer;
  CHECK(writer.Open(path));
  CHECK(writer.WriteSessionStart());
  CHECK(writer.WriteDump({Big(1, 10, kT0)}));
  struct stat before;
  CHECK(stat(path.c_str(), &before) == 0);

  signal(SIGXFSZ, SIG_IGN);  // writes past the limit then fail with EFBIG instead of killing us
  rlimit saved;
  CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit limited = saved;
  limited.rlim_cur = static_cast<rlim_t>(before.st_size) + 64;
  CHECK(setrlimit(RLIMIT_FSIZE, &limited) == 0);
  CHECK(!writer.WriteDump({Big(2, 2000, kT0 + kSecond)}));
  CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
  struct stat after;
  CHECK(stat(path.c_str(), &after) == 0 && after.st_size == before.st_size);

  CHECK(writer.WriteDump({Big(2, 2000, kT0 + 2 * kSecond)}));
  writer.Close();
  std::vector<PacketSummary> packets = Packets(path);
  CHECK(CheckProfilePackets(packets) == 2);
  size_t cleared = 0;
  for (const PacketSummary& s : packets) cleared += s.flags == 1;
  CHECK(cleared == 2);
}

void TestErrorsAreReported(const std::string& dir) {
  TraceWriter writer;
  CHECK(!writer.Open("/nonexistent-dir/trace"));
  CHECK(!writer.WriteSessionStart());
  // Every write fails, as on a full device: EFBIG at a file size limit of 0.
  signal(SIGXFSZ, SIG_IGN);
  rlimit saved;
  CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit limited = saved;
  limited.rlim_cur = 0;
  CHECK(setrlimit(RLIMIT_FSIZE, &limited) == 0);
  CHECK(writer.Open(dir + "/full.pftrace"));
  CHECK(!writer.WriteSessionStart());
  CHECK(!writer.WriteDump({AppA(kT0, 1)}));
  CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
  writer.Close();
  unlink((dir + "/full.pftrace").c_str());
}

void WriteFile(const std::string& path, const char* text) {
  FILE* f = fopen(path.c_str(), "w");
  CHECK(f != nullptr && fputs(text, f) >= 0 && fclose(f) == 0);
}

// A root daemon writes its trace into a directory the shell user owns: what that user may have put
// there, a file at the trace's name, a symbolic link at it or in place of a directory on the way,
// is refused and left as it was, and nothing is created where a link points.
void TestOpenCreatesANewFileFollowingNoLink(const std::string& dir) {
  TraceWriter writer;
  const std::string existing = dir + "/existing.pftrace";
  WriteFile(existing, "not a trace");
  CHECK(!writer.Open(existing));
  CHECK(ReadWholeFile(existing) == "not a trace");

  const std::string target = dir + "/target", link = dir + "/link.pftrace";
  CHECK(symlink(target.c_str(), link.c_str()) == 0);
  CHECK(!writer.Open(link));
  CHECK(access(target.c_str(), F_OK) != 0);

  const std::string real_dir = dir + "/real", linked_dir = dir + "/linked";
  CHECK(mkdir(real_dir.c_str(), 0755) == 0 && symlink(real_dir.c_str(), linked_dir.c_str()) == 0);
  CHECK(!writer.Open(linked_dir + "/trace.pftrace"));
  CHECK(!writer.Open(linked_dir + "/sub/../trace.pftrace"));
  CHECK(access((real_dir + "/trace.pftrace").c_str(), F_OK) != 0);

  CHECK(writer.Open(real_dir + "/trace.pftrace") && writer.WriteSessionStart());
  writer.Close();
  CHECK(Packets(real_dir + "/trace.pftrace").size() == 1);
  for (const std::string& path : {existing, link, linked_dir, real_dir + "/trace.pftrace"}) {
    unlink(path.c_str());
  }
  rmdir(real_dir.c_str());
}

// The shell user's daemon reaches its trace directory through directories it may only search
// (a phone's /data/local, root's 0751): it opens them without reading them. Run as root (as CI
// is), the test drops to another uid in a child, where permissions count.
void TestOpenPassesSearchOnlyDirectories(const std::string& dir) {
  if (geteuid() != 0) return;
  const uid_t kShell = 2000;
  const std::string search_only = dir + "/search-only", own = search_only + "/own";
  CHECK(mkdir(search_only.c_str(), 0711) == 0 && mkdir(own.c_str(), 0755) == 0);
  CHECK(chown(own.c_str(), kShell, kShell) == 0 && chmod(dir.c_str(), 0711) == 0);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    if (setgid(kShell) != 0 || setuid(kShell) != 0) _exit(2);
    TraceWriter writer;
    _exit(writer.Open(own + "/trace.pftrace") && writer.WriteSessionStart() ? 0 : 1);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(Packets(own + "/trace.pftrace").size() == 1);
  unlink((own + "/trace.pftrace").c_str());
  rmdir(own.c_str());
  rmdir(search_only.c_str());
}

// At --max-trace-size a dump that would pass the cap leaves nothing of itself, and none after it
// is written; the file ends with the last whole dump.
void TestSizeCap(const std::string& path) {
  uint64_t first_dump_end;
  {
    TraceWriter writer;
    CHECK(writer.Open(path) && writer.WriteSessionStart() && writer.WriteDump({AppA(kT0, 1)}));
    struct stat st;
    CHECK(stat(path.c_str(), &st) == 0);
    first_dump_end = static_cast<uint64_t>(st.st_size);
  }
  CHECK(unlink(path.c_str()) == 0);  // Open creates a new file only
  TraceWriter writer;
  writer.set_max_bytes(first_dump_end + 100);
  CHECK(writer.Open(path) && writer.WriteSessionStart() && writer.WriteDump({AppA(kT0, 1)}));
  CHECK(!writer.full());
  CHECK(!writer.WriteDump({AppA(kT0 + kSecond, 2)}));
  CHECK(writer.full());
  CHECK(!writer.WriteDump({AppA(kT0 + 2 * kSecond, 1)}));
  writer.Close();
  struct stat st;
  CHECK(stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == first_dump_end);
  CHECK(CheckProfilePackets(Packets(path)) == 1);
  unlink(path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  char dir_template[] = "/tmp/trace_writer_test.XXXXXX";
  CHECK(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const std::string trace = argc > 1 ? argv[1] : dir + "/trace.pftrace";
  const std::string recovery = argc > 2 ? argv[2] : dir + "/recovery.pftrace";
  TestErrorsAreReported(dir);
  TestOpenCreatesANewFileFollowingNoLink(dir);
  TestOpenPassesSearchOnlyDirectories(dir);
  TestSizeCap(dir + "/capped.pftrace");
  WriteMainTrace(trace);
  WriteRecoveryTrace(recovery);
  if (argc < 2) unlink(trace.c_str());
  if (argc < 3) unlink(recovery.c_str());
  rmdir(dir.c_str());
  printf("trace_writer_test: ok\n");
  return 0;
}

// droidheapd: the on-device half of droidheap. Started by the host (adb shell, or the emulator
// device); see daemon.h for what it does and `droidheapd --help` for its flags.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "daemon/daemon.h"
#include "protocol/ring_buffer.h"
#include "protocol/wire_protocol.h"

namespace {

const char kUsage[] =
    "usage: droidheapd --socket PATH --output TRACE [targets] [options]\n"
    "targets: --pid PID[,PID]  --spawned PID[,PID]  --name NAME[,NAME]  --all\n"
    "options: --interval BYTES (4096)  --max-stack BYTES (65536)  --shmem-size BYTES (8 MiB)\n"
    "         --dump-interval-ms MS  --dump-at-max  --no-block-client  --no-exact-totals\n"
    "         --disable-fork-teardown  --heaps NAME[,NAME]  --all-heaps  --unreachable\n"
    "         --block-timeout-us US (5000000)  --seed N  --workers N (1)\n"
    "         --exit-when-clients-gone  --stop-when-stdin-closes\n"
    "         --max-memory BYTES  --max-trace-size BYTES (0: no cap, the default)\n";

bool ParseNumber(const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

template <typename Fn>
bool ForEachListItem(const char* list, Fn fn) {
  std::string text(list);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start && !fn(text.substr(start, end - start))) return false;
    start = end + 1;
  }
  return true;
}

int Fail(const char* what, const char* value) {
  fprintf(stderr, "droidheapd: invalid %s: %s\n%s", what, value ? value : "(missing)", kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  enum {
    kSocket = 1000, kOutput, kPid, kSpawned, kName, kAll, kInterval, kMaxStack, kShmemSize,
    kDumpInterval, kDumpAtMax, kNoBlock, kNoTotals, kForkChildren, kHeaps, kAllHeaps,
    kBlockTimeout, kSeed, kWorkers, kExitWhenGone, kStdinLifeline, kMaxMemory, kMaxTraceSize,
    kUnreachable, kHelp
  };
  static const option kOptions[] = {
      {"socket", required_argument, nullptr, kSocket},
      {"output", required_argument, nullptr, kOutput},
      {"pid", required_argument, nullptr, kPid},
      {"spawned", required_argument, nullptr, kSpawned},
      {"name", required_argument, nullptr, kName},
      {"all", no_argument, nullptr, kAll},
      {"interval", required_argument, nullptr, kInterval},
      {"max-stack", required_argument, nullptr, kMaxStack},
      {"shmem-size", required_argument, nullptr, kShmemSize},
      {"dump-interval-ms", required_argument, nullptr, kDumpInterval},
      {"dump-at-max", no_argument, nullptr, kDumpAtMax},
      {"unreachable", no_argument, nullptr, kUnreachable},
      {"no-block-client", no_argument, nullptr, kNoBlock},
      {"no-exact-totals", no_argument, nullptr, kNoTotals},
      {"disable-fork-teardown", no_argument, nullptr, kForkChildren},
      {"heaps", required_argument, nullptr, kHeaps},
      {"all-heaps", no_argument, nullptr, kAllHeaps},
      {"block-timeout-us", required_argument, nullptr, kBlockTimeout},
      {"seed", required_argument, nullptr, kSeed},
      {"workers", required_argument, nullptr, kWorkers},
      {"exit-when-clients-gone", no_argument, nullptr, kExitWhenGone},
      {"stop-when-stdin-closes", no_argument, nullptr, kStdinLifeline},
      {"max-memory", required_argument, nullptr, kMaxMemory},
      {"max-trace-size", required_argument, nullptr, kMaxTraceSize},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0},
  };
  droidheap::DaemonConfig config;
  uint64_t n = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", kOptions, nullptr)) != -1) {
    switch (opt) {
      case kSocket: config.socket_path = optarg; break;
      case kOutput: config.output_path = optarg; break;
      case kPid:
      case kSpawned: {
        std::vector<int>& list = opt == kPid ? config.pids : config.spawned_pids;
        if (!ForEachListItem(optarg, [&](const std::string& item) {
              if (!ParseNumber(item.c_str(), 1, 0x7fffffff, &n)) return false;
              list.push_back(static_cast<int>(n));
              return true;
            })) {
          return Fail(opt == kPid ? "--pid" : "--spawned", optarg);
        }
        break;
      }
      case kName:
        ForEachListItem(optarg, [&](const std::string& item) {
          config.names.push_back(item);
          return true;
        });
        break;
      case kAll: config.all = true; break;
      case kInterval:
        if (!ParseNumber(optarg, 1, uint64_t{1} << 40, &config.sampling_interval)) {
          return Fail("--interval", optarg);
        }
        break;
      case kMaxStack:
        if (!ParseNumber(optarg, 0, 8u << 20, &n)) return Fail("--max-stack", optarg);
        config.max_stack_bytes = static_cast<uint32_t>(n);
        break;
      case kShmemSize:
        // Mapped twice over (ring_buffer.h): a 32-bit daemon's address space caps it at 1 GiB.
        if (!ParseNumber(optarg, 8192, std::min(uint64_t{1} << 32, uint64_t{SIZE_MAX / 4} + 1),
                         &n) ||
            (n & (n - 1)) != 0) {
          return Fail("--shmem-size (a power of two)", optarg);
        }
        config.shmem_size = n;
        break;
      case kDumpInterval:
        if (!ParseNumber(optarg, 1, 1u << 31, &n)) return Fail("--dump-interval-ms", optarg);
        config.dump_interval_ms = static_cast<uint32_t>(n);
        break;
      case kDumpAtMax: config.dump_at_max = true; break;
      case kUnreachable: config.find_unreachable = true; break;
      case kNoBlock: config.block_client = false; break;
      case kNoTotals: config.exact_totals = false; break;
      case kForkChildren: config.profile_forked_children = true; break;
      case kHeaps: {
        // As the client receives them: NUL-terminated in DaemonReply::heap_names, an empty one
        // after the last.
        size_t room = droidheap::kHeapNamesSize - 1;
        if (!ForEachListItem(optarg, [&](const std::string& item) {
              if (item.size() >= droidheap::kHeapNameSize || item.size() + 1 > room) return false;
              room -= item.size() + 1;
              config.heaps.push_back(item);
              return true;
            }) ||
            config.heaps.empty()) {
          return Fail("--heaps (names of at most 63 bytes, 255 in all)", optarg);
        }
        break;
      }
      case kAllHeaps: config.all_heaps = true; break;
      case kBlockTimeout:
        if (!ParseNumber(optarg, 1, UINT32_MAX, &n)) return Fail("--block-timeout-us", optarg);
        config.block_timeout_us = static_cast<uint32_t>(n);
        break;
      case kSeed:
        if (!ParseNumber(optarg, 0, UINT64_MAX, &config.random_seed)) return Fail("--seed", optarg);
        break;
      case kWorkers:
        if (!ParseNumber(optarg, 1, 64, &n)) return Fail("--workers", optarg);
        config.workers = static_cast<int>(n);
        break;
      case kExitWhenGone: config.exit_when_clients_gone = true; break;
      case kStdinLifeline: config.stop_when_stdin_closes = true; break;
      case kMaxMemory:
        if (!ParseNumber(optarg, 0, UINT64_MAX, &config.max_memory_bytes)) {
          return Fail("--max-memory", optarg);
        }
        break;
      case kMaxTraceSize:
        if (!ParseNumber(optarg, 0, UINT64_MAX, &config.max_trace_bytes)) {
          return Fail("--max-trace-size", optarg);
        }
        break;
      case kHelp: fputs(kUsage, stdout); return 0;
      default: fputs(kUsage, stderr); return 2;
    }
  }
  if (optind != argc) return Fail("argument", argv[optind]);
  if (const char* stack_log = getenv("DROIDHEAP_STACK_LOG")) config.stack_log_path = stack_log;
  if (config.socket_path.empty()) return Fail("--socket", nullptr);
  if (config.output_path.empty()) return Fail("--output", nullptr);
  // The stack copy and its record must fit in half the buffer (see ring_buffer.h).
  if (config.LargestRecordBytes() > config.shmem_size / 2) {
    return Fail("--max-stack (too large for --shmem-size)", nullptr);
  }
  const long page_size = sysconf(_SC_PAGESIZE);
  if (page_size > 0 && config.shmem_size % static_cast<uint64_t>(page_size) != 0) {
    return Fail("--shmem-size (not a multiple of this device's page size)", nullptr);
  }
  return droidheap::Daemon(std::move(config)).Run();
}

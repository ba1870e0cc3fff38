// Unwinding throughput: droidheap::DwarfUnwinder against elfutils' libdwfl (the unwinder ddprof
// uses), single thread, on the same stacks.
//
// The corpus is captured in this process the way the client captures a sampled allocation:
// DroidheapCaptureRegisters at the bottom of a call path (corpus.cc, -O2 -fomit-frame-pointer,
// recursing through different frame shapes and through qsort's callback), then a copy of the stack
// from sp to the top of the thread's stack or 64 KiB. Both unwinders then read the stack from the
// copy (and anything else from /proc/self/mem) and the code's CFI from the mapped files.
//
//   unwind_throughput [-n STACKS] [-s SECONDS] [DEPTH...]     default: -n 1000 -s 1 10 30 60
//
// Prints, per depth, the steady-state rate (caches warm: each unwinder has seen the corpus once)
// in unwinds per second of thread CPU time, the first (cold) pass, and how many stacks the two
// unwinders agree on exactly.
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "bench/corpus.h"
#include "client/register_capture.h"
#include "unwinder/dwarf_unwinder.h"
#include "unwinder/process_maps.h"
#include "unwinder/registers.h"
#include "unwinder/stack_memory.h"

namespace {

constexpr size_t kMaxStackCopy = 64 * 1024;  // the client's default limit
constexpr size_t kMaxFrames = 256;

struct Sample {
  uint64_t regs[droidheap::kMaxRegisters];
  uint64_t sp;
  uint64_t stack_top;  // 0 when the copy stopped short of the stack's top (as in the daemon)
  std::vector<uint8_t> stack;
};

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---------------------------------------------------------------------------------------------
// Capture

uint64_t StackHigh() {
  static uint64_t high = 0;
  if (high == 0) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        high = reinterpret_cast<uint64_t>(addr) + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  return high;
}

__attribute__((noinline)) void Capture(void* arg) {
  auto* samples = static_cast<std::vector<Sample>*>(arg);
  samples->emplace_back();
  Sample& s = samples->back();
  uint64_t captured[droidheap::kNativeCaptured];
  DroidheapCaptureRegisters(captured);
  droidheap::ExpandCapturedRegisters(droidheap::kNativeLayout, captured, s.regs);
  s.sp = s.regs[droidheap::kRegSp];
  uint64_t high = StackHigh();
  size_t size = high > s.sp ? std::min<uint64_t>(high - s.sp, kMaxStackCopy) : 0;
  s.stack.resize(size);
  memcpy(s.stack.data(), reinterpret_cast<const void*>(s.sp), size);
  s.stack_top = (size > 0 && size < kMaxStackCopy) ? s.sp + size : 0;
}

std::vector<Sample> BuildCorpus(int depth, size_t count) {
  std::vector<Sample> samples;
  samples.reserve(count);
  uint64_t sink = 0;
  for (size_t i = 0; i < count; ++i) {
    sink += droidheap_bench::RunCorpusPath(i * 7919 + static_cast<uint64_t>(depth), depth, Capture,
                                           &samples);
  }
  __asm__ volatile("" : : "r"(sink));
  return samples;
}

// ---------------------------------------------------------------------------------------------
// droidheap

struct DroidheapSide {
  int maps_fd;
  int mem_fd;
  droidheap::ElfCache elf_cache;
  droidheap::ProcessMaps maps;
  droidheap::DwarfUnwinder unwinder{&elf_cache};

  DroidheapSide(int maps_fd_in, int mem_fd_in) : maps_fd(maps_fd_in), mem_fd(mem_fd_in) {
    maps.Reload(maps_fd);
  }

  size_t Unwind(const Sample& s, std::vector<uint64_t>* pcs) {
    droidheap::StackMemory memory(s.sp, s.stack.data(), s.stack.size(), mem_fd);
    droidheap::UnwindResult result;
    unwinder.Unwind(droidheap::kNativeLayout, s.regs, s.stack_top, memory, &maps, maps_fd,
                    kMaxFrames, &result);
    if (pcs != nullptr) *pcs = result.pcs;
    return result.pcs.size();
  }
};

// ---------------------------------------------------------------------------------------------
// libdwfl: modules from /proc/self/maps, registers and stack from the sample, everything else
// from /proc/self/mem.

struct DwflContext {
  int mem_fd;
  pid_t pid;
  const Sample* current = nullptr;
};

bool ReadWord(const DwflContext* ctx, uint64_t address, uint64_t* value) {
  const Sample* s = ctx->current;
  if (s != nullptr && address >= s->sp && address - s->sp <= s->stack.size() &&
      s->stack.size() - (address - s->sp) >= sizeof(uint64_t)) {
    memcpy(value, s->stack.data() + (address - s->sp), sizeof(uint64_t));
    return true;
  }
  return pread(ctx->mem_fd, value, sizeof(uint64_t), static_cast<off_t>(address)) ==
         static_cast<ssize_t>(sizeof(uint64_t));
}

pid_t DwflNextThread(Dwfl*, void* dwfl_arg, void** thread_argp) {
  auto* ctx = static_cast<DwflContext*>(dwfl_arg);
  if (*thread_argp != nullptr) return 0;  // one thread only
  *thread_argp = ctx;
  return ctx->pid;
}

bool DwflGetThread(Dwfl*, pid_t tid, void* dwfl_arg, void** thread_argp) {
  auto* ctx = static_cast<DwflContext*>(dwfl_arg);
  *thread_argp = ctx;
  return tid == ctx->pid;
}

bool DwflMemoryRead(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* dwfl_arg) {
  uint64_t value;
  if (!ReadWord(static_cast<DwflContext*>(dwfl_arg), addr, &value)) return false;
  *result = value;
  return true;
}

bool DwflSetInitialRegisters(Dwfl_Thread* thread, void* thread_arg) {
  const Sample* s = static_cast<DwflContext*>(thread_arg)->current;
  Dwarf_Word regs[droidheap::kMaxRegisters];
  for (int i = 0; i < droidheap::kMaxRegisters; ++i) regs[i] = s->regs[i];
#if defined(__x86_64__)
  // rax..r15 and the return-address column (rip).
  if (!dwfl_thread_state_registers(thread, 0, 17, regs)) return false;
#elif defined(__aarch64__)
  // x0..x30 and sp; the pc has no DWARF number.
  if (!dwfl_thread_state_registers(thread, 0, 32, regs)) return false;
#endif
  dwfl_thread_state_register_pc(thread, s->regs[droidheap::kRegPc]);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    DwflNextThread, DwflGetThread, DwflMemoryRead, DwflSetInitialRegisters, nullptr, nullptr,
};

char* g_debuginfo_path = nullptr;
const Dwfl_Callbacks kDwflCallbacks = {
    dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, &g_debuginfo_path,
};

int CollectFrame(Dwfl_Frame* frame, void* arg) {
  auto* pcs = static_cast<std::vector<uint64_t>*>(arg);
  Dwarf_Addr pc;
  bool activation;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  pcs->push_back(pc);
  return pcs->size() >= kMaxFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

struct DwflSide {
  DwflContext ctx;
  Dwfl* dwfl = nullptr;
  std::vector<uint64_t> scratch;

  explicit DwflSide(int mem_fd) {
    ctx.mem_fd = mem_fd;
    ctx.pid = getpid();
    dwfl = dwfl_begin(&kDwflCallbacks);
    if (dwfl == nullptr) Die("dwfl_begin");
    dwfl_report_begin(dwfl);
    if (dwfl_linux_proc_report(dwfl, ctx.pid) != 0) Die("dwfl_linux_proc_report");
    if (dwfl_report_end(dwfl, nullptr, nullptr) != 0) Die("dwfl_report_end");
    if (!dwfl_attach_state(dwfl, nullptr, ctx.pid, &kThreadCallbacks, &ctx)) {
      Die("dwfl_attach_state");
    }
    scratch.reserve(kMaxFrames);
  }
  ~DwflSide() { dwfl_end(dwfl); }

  static void Die(const char* what) {
    fprintf(stderr, "%s: %s\n", what, dwfl_errmsg(-1));
    exit(1);
  }

  size_t Unwind(const Sample& s, std::vector<uint64_t>* pcs) {
    ctx.current = &s;
    std::vector<uint64_t>* out = pcs != nullptr ? pcs : &scratch;
    out->clear();
    dwfl_getthread_frames(dwfl, ctx.pid, CollectFrame, out);
    return out->size();
  }
};

// ---------------------------------------------------------------------------------------------

struct Rates {
  double cold_setup_s = 0;  // constructing the unwinder (maps, modules)
  double cold_pass_s = 0;   // the first pass over the corpus
  double first_unwind_s = 0;  // its first stack: reading every file's unwind tables
  double steady = 0;        // unwinds per CPU second, caches warm
  size_t frames = 0;        // frames in one pass
};

template <typename Side, typename Make>
Rates Measure(const std::vector<Sample>& corpus, double seconds, Make make,
              std::vector<std::vector<uint64_t>>* stacks) {
  Rates r;
  double t0 = CpuSeconds();
  Side* side = make();
  double t1 = CpuSeconds();
  stacks->assign(corpus.size(), {});
  for (size_t i = 0; i < corpus.size(); ++i) {
    r.frames += side->Unwind(corpus[i], &(*stacks)[i]);
    if (i == 0) r.first_unwind_s = CpuSeconds() - t1;
  }
  double t2 = CpuSeconds();
  r.cold_setup_s = t1 - t0;
  r.cold_pass_s = t2 - t1;
  size_t unwinds = 0;
  double start = CpuSeconds(), now = start;
  do {
    for (const Sample& s : corpus) side->Unwind(s, nullptr);
    unwinds += corpus.size();
    now = CpuSeconds();
  } while (now - start < seconds);
  r.steady = static_cast<double>(unwinds) / (now - start);
  delete side;
  return r;
}

std::string Hex(const std::vector<uint64_t>& pcs) {
  std::string out;
  char buf[24];
  for (uint64_t pc : pcs) {
    snprintf(buf, sizeof(buf), " %lx", static_cast<unsigned long>(pc));
    out += buf;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 1000;
  double seconds = 1.0;
  bool verbose = false;
  std::vector<int> depths;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      count = static_cast<size_t>(atol(argv[++i]));
    } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (strcmp(argv[i], "-v") == 0) {
      verbose = true;
    } else if (argv[i][0] != '-' && atoi(argv[i]) > 0) {
      depths.push_back(atoi(argv[i]));
    } else {
      fprintf(stderr, "usage: %s [-n STACKS] [-s SECONDS] [-v] [DEPTH...]\n", argv[0]);
      return 2;
    }
  }
  if (depths.empty()) depths = {10, 30, 60};
  if (count == 0) count = 1;

  int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  int mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (maps_fd < 0 || mem_fd < 0) {
    perror("/proc/self");
    return 1;
  }
  printf("unwinding %zu captured stacks per depth, single thread, unwinds per CPU second\n", count);
  bool all_agree_enough = true;
  for (int depth : depths) {
    std::vector<Sample> corpus = BuildCorpus(depth, count);
    std::vector<std::vector<uint64_t>> ours, theirs;
    Rates d = Measure<DroidheapSide>(
        corpus, seconds, [&] { return new DroidheapSide(maps_fd, mem_fd); }, &ours);
    Rates w = Measure<DwflSide>(corpus, seconds, [&] { return new DwflSide(mem_fd); }, &theirs);
    size_t agree = 0;
    size_t shown = 0;
    std::set<std::vector<uint64_t>> distinct(theirs.begin(), theirs.end());
    for (size_t i = 0; i < corpus.size(); ++i) {
      if (ours[i] == theirs[i]) {
        ++agree;
      } else if (verbose && shown++ < 3) {
        printf("  stack %zu differs:\n    droidheap:%s\n    libdwfl:  %s\n", i,
               Hex(ours[i]).c_str(), Hex(theirs[i]).c_str());
      }
    }
    double agree_pct = 100.0 * static_cast<double>(agree) / static_cast<double>(corpus.size());
    if (agree_pct < 99.0) all_agree_enough = false;
    double n = static_cast<double>(corpus.size());
    printf("depth %d: droidheap %.0f unwinds/s  libdwfl %.0f unwinds/s  ratio %.1fx  (agree %.1f%%)\n",
           depth, d.steady, w.steady, d.steady / w.steady, agree_pct);
    printf("  cold first pass: droidheap %.0f unwinds/s  libdwfl %.0f unwinds/s  ratio %.1fx\n",
           n / d.cold_pass_s, n / w.cold_pass_s, w.cold_pass_s / d.cold_pass_s);
    printf("  first stack (setup + first unwind): droidheap %.2f ms  libdwfl %.2f ms\n",
           (d.cold_setup_s + d.first_unwind_s) * 1e3, (w.cold_setup_s + w.first_unwind_s) * 1e3);
    printf("  frames per stack: droidheap %.1f  libdwfl %.1f;  %zu distinct stacks\n",
           static_cast<double>(d.frames) / n, static_cast<double>(w.frames) / n, distinct.size());
    fflush(stdout);
  }
  return all_agree_enough ? 0 : 3;
}

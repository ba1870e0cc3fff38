// Test builds only (CMake option DROIDHEAP_REFERENCE_UNWIND): for every sampled allocation, the
// client also unwinds its own stack in process with libgcc's unwinder and appends the result to
// the file named by $DROIDHEAP_REFERENCE_STACKS, one line per record:
//
//   <pid> <sequence> <hex pc> <hex pc> ...\n      innermost first, every frame _Unwind_GetIP gives
//
// bench/unwind_agreement.py compares these lines with the stacks the daemon booked. The first
// time a process writes a line it also copies its /proc/self/maps to
// $DROIDHEAP_REFERENCE_STACKS.maps.<pid>, so the comparison can tell which pcs are the profiler's.
//
// Hook path: no heap, no stdio. Lines are formatted into a stack buffer and written with a single
// write() to an O_APPEND fd, so threads and processes can share the file.
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>

namespace {

constexpr size_t kMaxFrames = 256;
constexpr char kEnvVar[] = "DROIDHEAP_REFERENCE_STACKS";

std::atomic<int> g_fd{-1};
std::atomic<int> g_maps_written_pid{0};

struct Line {
  char text[kMaxFrames * 17 + 64];
  size_t size = 0;
  size_t frames = 0;

  void Put(char c) {
    if (size < sizeof(text)) text[size++] = c;
  }
  void PutDecimal(uint64_t v) {
    char digits[24];
    size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0) Put(digits[--n]);
  }
  void PutHex(uint64_t v) {
    char digits[16];
    size_t n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v & 0xf];
      v >>= 4;
    } while (v != 0);
    while (n > 0) Put(digits[--n]);
  }
};

_Unwind_Reason_Code AddFrame(_Unwind_Context* context, void* arg) {
  Line* line = static_cast<Line*>(arg);
  uint64_t pc = static_cast<uint64_t>(_Unwind_GetIP(context));
  // libgcc calls back once more, with no pc, after the outermost frame.
  if (pc == 0) return _URC_END_OF_STACK;
  if (line->frames >= kMaxFrames) return _URC_END_OF_STACK;
  ++line->frames;
  line->Put(' ');
  line->PutHex(pc);
  return _URC_NO_REASON;
}

int OpenOnce(const char* path) {
  int fd = g_fd.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int expected = -1;
  if (!g_fd.compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
    close(fd);
    return expected;
  }
  return fd;
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Copies /proc/self/maps to <path>.maps.<pid>, once per process.
void WriteMapsOnce(const char* path, int pid) {
  int previous = g_maps_written_pid.load(std::memory_order_acquire);
  if (previous == pid || !g_maps_written_pid.compare_exchange_strong(previous, pid)) return;
  Line name;
  for (const char* p = path; *p != '\0'; ++p) name.Put(*p);
  for (const char* p = ".maps."; *p != '\0'; ++p) name.Put(*p);
  name.PutDecimal(static_cast<uint64_t>(pid));
  if (name.size >= sizeof(name.text)) return;
  name.text[name.size] = '\0';
  int in = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (in < 0) return;
  int out = open(name.text, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out >= 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0) WriteAll(out, buf, static_cast<size_t>(n));
    close(out);
  }
  close(in);
}

}  // namespace

extern "C" __attribute__((visibility("hidden"), noinline)) void DroidheapReferenceUnwind(
    int pid, uint64_t sequence) {
  const char* path = getenv(kEnvVar);
  if (path == nullptr || path[0] == '\0') return;
  int fd = OpenOnce(path);
  if (fd < 0) return;
  WriteMapsOnce(path, pid);
  Line line;
  line.PutDecimal(static_cast<uint64_t>(pid));
  line.Put(' ');
  line.PutDecimal(sequence);
  _Unwind_Backtrace(AddFrame, &line);
  if (line.size >= sizeof(line.text)) line.size = sizeof(line.text) - 1;
  line.text[line.size++] = '\n';
  WriteAll(fd, line.text, line.size);
}

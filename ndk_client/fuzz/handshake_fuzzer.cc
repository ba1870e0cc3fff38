// The daemon's hello reader (daemon/handshake.h) against any client: the input is what a client
// sends, in pieces of the sizes it picks, with the fds it picks (none, its own maps and mem, the
// wrong files, too many) on any piece, read without blocking after each. Whatever arrives, the
// reader ends in done, bad or waiting, and leaks no fd.
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "daemon/handshake.h"
#include "fuzz/fuzz_input.h"
#include "protocol/fd_passing.h"

namespace {

std::vector<int> FdsFor(uint8_t choice) {
  static const char* const kFiles[] = {"/proc/self/maps", "/proc/self/mem", "/dev/null"};
  std::vector<int> fds;
  for (int i = 0; i < choice % 4; ++i) {
    fds.push_back(open(kFiles[(choice >> (2 + i)) % 3], O_RDONLY | O_CLOEXEC));
  }
  return fds;
}


// Open fds on the files a client may send (libFuzzer's own fds come and go: not counted).
int OpenSendableFds() {
  int count = 0;
  for (int fd = 0; fd < 128; ++fd) {  // fds are numbered from the lowest free
    char link[64], target[64] = {};
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    if (readlink(link, target, sizeof(target) - 1) <= 0) continue;
    count += strcmp(target, "/dev/null") == 0 || strncmp(target, "/proc/", 6) == 0;
  }
  return count;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int open_at_start = OpenSendableFds();
  droidheap::FuzzInput input(data, size);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) abort();
  {
    droidheap::HelloReader reader;
    droidheap::HelloReader::Status status = droidheap::HelloReader::Status::kNeedMore;
    while (input.remaining() > 0 && status == droidheap::HelloReader::Status::kNeedMore) {
      const uint8_t fd_choice = input.Take<uint8_t>();
      const uint16_t want = input.Take<uint16_t>() % 512;
      size_t got;
      const uint8_t* piece = input.TakeBytes(want, &got);
      std::vector<int> fds = FdsFor(fd_choice);
      if (got > 0) droidheap::SendWithFds(pair[1], piece, got, fds.data(), fds.size(), MSG_DONTWAIT);
      for (int fd : fds) close(fd);
      if (fd_choice & 0x80) shutdown(pair[1], SHUT_WR);  // the client goes away
      status = reader.Read(pair[0]);
    }
    if (status == droidheap::HelloReader::Status::kDone) {
      int maps_fd, mem_fd;
      reader.TakeFds(&maps_fd, &mem_fd);
      droidheap::MapsAreProcessOwn(maps_fd, getpid());
      droidheap::MemIsProcessOwn(mem_fd, getpid());
      droidheap::ClientLayout(reader.hello());
      close(maps_fd);
      if (mem_fd >= 0) close(mem_fd);
    }
  }
  close(pair[0]);
  close(pair[1]);
  // The reader closed every fd it received and did not hand over; fds still queued in the
  // socket went with it.
  if (OpenSendableFds() != open_at_start) {
    fprintf(stderr, "handshake_fuzzer: fds leaked\n");
    abort();
  }
  return 0;
}

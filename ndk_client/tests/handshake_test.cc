// The daemon's hello reader against clients that send their hello whole, a byte at a time, with
// too many or too few fds, with lies in it, or not at all; and the identity check of the fds.
#include "daemon/handshake.h"
#include "protocol/fd_passing.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

#include "common/platform.h"
#include "tests/test_util.h"

using namespace droidheap;

namespace {

struct Pair {
  Pair() {
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    CHECK(fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0);
  }
  ~Pair() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseClient() {
    close(fds[1]);
    fds[1] = -1;
  }
  int daemon() const { return fds[0]; }
  int client() const { return fds[1]; }
  int fds[2];
};


void Send(int sock, const void* data, size_t size, const std::vector<int>& fds) {
  CHECK(SendWithFds(sock, data, size, fds.data(), fds.size()));
}

ClientHello Hello(uint32_t size = sizeof(ClientHello)) {
  ClientHello hello{};
  hello.magic = kHelloMagic;
  hello.version = kProtocolVersion;
  hello.size = size;
  hello.pid = getpid();
  hello.abi = static_cast<uint32_t>(kNativeLayout.abi);
  return hello;
}

std::vector<int> OwnFds() {
  return {open("/proc/self/maps", O_RDONLY | O_CLOEXEC), open("/proc/self/mem", O_RDONLY | O_CLOEXEC)};
}

int OpenFds() {
  int count = 0;
  for (int fd = 0; fd < 1024; ++fd) count += fcntl(fd, F_GETFD) >= 0;
  return count;
}

void TestWholeHello() {
  Pair pair;
  ClientHello hello = Hello();
  std::vector<int> fds = OwnFds();
  Send(pair.client(), &hello, sizeof(hello), fds);
  HelloReader reader;
  CHECK(reader.Read(pair.daemon()) == HelloReader::Status::kDone);
  CHECK(reader.hello().abi == hello.abi && reader.hello().size == sizeof(hello));
  int maps_fd, mem_fd;
  reader.TakeFds(&maps_fd, &mem_fd);
  CHECK(maps_fd >= 0 && mem_fd >= 0);
  CHECK(MapsAreProcessOwn(maps_fd, getpid()) && MemIsProcessOwn(mem_fd, getpid()));
  CHECK(!MapsAreProcessOwn(mem_fd, getpid()) && !MemIsProcessOwn(maps_fd, getpid()));  // swapped
  // Another process's. Under qemu-user (the bionic runs) maps come as a memfd, which passes for
  // any process's: there the mem fd alone tells (handshake.h).
  CHECK(MapsAreEmulated() || !MapsAreProcessOwn(maps_fd, getppid()));
  CHECK(!MemIsProcessOwn(mem_fd, getppid()));
  for (int fd : {maps_fd, mem_fd, fds[0], fds[1]}) close(fd);
}

// A client that cannot open its /proc/self/mem sends its maps alone.
void TestHelloWithTheMapsAlone() {
  Pair pair;
  ClientHello hello = Hello();
  int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  Send(pair.client(), &hello, sizeof(hello), {maps});
  HelloReader reader;
  CHECK(reader.Read(pair.daemon()) == HelloReader::Status::kDone);
  int maps_fd, mem_fd;
  reader.TakeFds(&maps_fd, &mem_fd);
  CHECK(maps_fd >= 0 && mem_fd == -1 && MapsAreProcessOwn(maps_fd, getpid()));
  for (int fd : {maps_fd, maps}) close(fd);
}

void TestByteByByteAndNothingYet() {
  Pair pair;
  HelloReader reader;
  CHECK(reader.Read(pair.daemon()) == HelloReader::Status::kNeedMore);  // said nothing yet
  ClientHello hello = Hello();
  std::vector<int> fds = OwnFds();
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&hello);
  for (size_t i = 0; i < sizeof(hello); ++i) {
    Send(pair.client(), bytes + i, 1, i == 0 ? fds : std::vector<int>{});
    const HelloReader::Status status = reader.Read(pair.daemon());
    CHECK(status == (i + 1 == sizeof(hello) ? HelloReader::Status::kDone
                                            : HelloReader::Status::kNeedMore));
  }
  for (int fd : fds) close(fd);
}

void TestOlderAndNewerHellos() {
  {  // version 1: no abi field
    Pair pair;
    ClientHello hello = Hello(kClientHelloV1Size);
    hello.version = 1;
    std::vector<int> fds = OwnFds();
    Send(pair.client(), &hello, kClientHelloV1Size, fds);
    HelloReader reader;
    CHECK(reader.Read(pair.daemon()) == HelloReader::Status::kDone);
    CHECK(reader.hello().abi == 0 && ClientLayout(reader.hello()) == &kNativeLayout);
    for (int fd : fds) close(fd);
  }
  {  // a newer client's longer hello: what follows is read and dropped
    Pair pair;
    uint8_t bytes[sizeof(ClientHello) + 100];
    memset(bytes, 0xab, sizeof(bytes));
    ClientHello hello = Hello(sizeof(bytes));
    memcpy(bytes, &hello, sizeof(hello));
    std::vector<int> fds = OwnFds();
    Send(pair.client(), bytes, sizeof(bytes), fds);
    const char after = 'w';  // a wake-up byte, after the hello: not part of it
    Send(pair.client(), &after, 1, {});
    HelloReader reader;
    CHECK(reader.Read(pair.daemon()) == HelloReader::Status::kDone);
    CHECK(reader.hello().abi == hello.abi);
    char left;
    CHECK(recv(pair.daemon(), &left, 1, 0) == 1 && left == 'w');
    for (int fd : fds) close(fd);
  }
}

// Each of these is refused, and every fd that came with it closed.
void TestBadHellos() {
  struct Case {
    const char* what;
    ClientHello hello;
    size_t send_size;
    int fd_count;
    bool close_after;
  };
  ClientHello bad_magic = Hello();
  bad_magic.magic = 0xdeadbeef;
  ClientHello too_long = Hello();
  too_long.size = kMaxHelloSize + 1;
  ClientHello too_short = Hello();
  too_short.size = kClientHelloV1Size - 1;
  ClientHello version_0 = Hello();
  version_0.version = 0;
  const Case cases[] = {
      {"bad magic", bad_magic, sizeof(ClientHello), 2, false},
      {"size past the limit", too_long, sizeof(ClientHello), 2, false},
      {"size below version 1's", too_short, sizeof(ClientHello), 2, false},
      {"version 0", version_0, sizeof(ClientHello), 2, false},
      {"no fds", Hello(), sizeof(ClientHello), 0, false},
      {"three fds", Hello(), sizeof(ClientHello), 3, false},
      {"more fds than a read takes", Hello(), sizeof(ClientHello), 12, false},
      {"gone half way", Hello(), 10, 2, true},
  };
  for (const Case& c : cases) {
    const int open_before = OpenFds();
    {
      Pair pair;
      std::vector<int> fds;
      for (int i = 0; i < c.fd_count; ++i) fds.push_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
      Send(pair.client(), &c.hello, c.send_size, fds);
      for (int fd : fds) close(fd);
      if (c.close_after) pair.CloseClient();
      HelloReader reader;
      HelloReader::Status status = reader.Read(pair.daemon());
      if (status != HelloReader::Status::kBad) {
        fprintf(stderr, "%s: not refused (%d)\n", c.what, static_cast<int>(status));
        CHECK(false);
      }
    }
    // Every fd that came is closed. Except under qemu-user (the bionic runs, handshake.h): it
    // receives into a control buffer twice the size of the guest's and leaves open, in the
    // process, the fds beyond what it hands over (a read takes 8), without MSG_CTRUNC.
    CHECK(OpenFds() == open_before || (MapsAreEmulated() && c.fd_count > 8));
  }
}

void TestForgedFds() {
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  char path[] = "/tmp/handshake_test_XXXXXX";
  int file_fd = mkstemp(path);  // a file that says what maps would
  unlink(path);
  CHECK(null_fd >= 0 && mem_fd >= 0 && maps_fd >= 0 && file_fd >= 0);
  CHECK(!MapsAreProcessOwn(null_fd, getpid()));
  CHECK(!MapsAreProcessOwn(file_fd, getpid()));
  CHECK(!MemIsProcessOwn(null_fd, getpid()) && !MemIsProcessOwn(-1, getpid()));
  // A memfd passes for maps under qemu-user only (handshake.h).
  int memfd = static_cast<int>(syscall(__NR_memfd_create, "maps", MFD_CLOEXEC));
  CHECK(memfd >= 0 && MapsAreProcessOwn(memfd, getpid()) == MapsAreEmulated());
  for (int fd : {null_fd, mem_fd, maps_fd, file_fd, memfd}) close(fd);
}

void TestPeers() {
  ucred self{getpid(), geteuid(), getegid()};
  ucred root{1, 0, 0};
  CHECK(PeerIsServed(self) && PeerIsServed(root));
  ucred other{1, geteuid() + 1, 0};
  CHECK(PeerIsServed(other) == (geteuid() == 0));
}

}  // namespace

int main() {
  TestWholeHello();
  TestHelloWithTheMapsAlone();
  TestByteByByteAndNothingYet();
  TestOlderAndNewerHellos();
  TestBadHellos();
  TestForgedFds();
  TestPeers();
  printf("handshake_test: ok\n");
  return 0;
}

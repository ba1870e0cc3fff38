#include "daemon/handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "protocol/fd_passing.h"

namespace droidheap {
namespace {

// More fds than a hello ever carries, so that a client sending too many is seen (and its fds
// closed) rather than cut off with MSG_CTRUNC.
constexpr size_t kMaxFdsPerRead = 8;

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

bool IsProcFileOf(int fd, int pid, const char* name) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
  struct stat expected, got;
  return stat(path, &expected) == 0 && fstat(fd, &got) == 0 && SameFile(expected, got);
}

// A memfd, as qemu-user's copy of a guest's maps is.
bool IsMemfd(int fd) {
  char link[64], target[16] = {};
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  return n > 0 && strncmp(target, "/memfd:", 7) == 0;
}

}  // namespace

HelloReader::~HelloReader() {
  for (int fd : fds_) close(fd);
}

HelloReader::Status HelloReader::Read(int sock) {
  while (received_ < wanted_) {
    iovec iov{bytes_ + received_, wanted_ - received_};
    alignas(cmsghdr) char control[CMSG_SPACE(kMaxFdsPerRead * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    // Whatever fds came are ours to close, whatever else is wrong with this read.
    ForEachReceivedFd(&msg, n, [this](int fd) { fds_.push_back(fd); });
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Status::kNeedMore : Status::kBad;
    }
    if (n == 0 || (msg.msg_flags & MSG_CTRUNC) || fds_.size() > 2) return Status::kBad;
    received_ += static_cast<size_t>(n);
    if (received_ == kClientHelloV1Size) {
      memcpy(&hello_, bytes_, kClientHelloV1Size);
      if (hello_.magic != kHelloMagic || hello_.version < kMinProtocolVersion ||
          hello_.size < kClientHelloV1Size || hello_.size > kMaxHelloSize) {
        return Status::kBad;
      }
      wanted_ = hello_.size;
    }
  }
  if (fds_.empty()) return Status::kBad;
  memcpy(&hello_, bytes_, std::min<size_t>(received_, sizeof(hello_)));
  return Status::kDone;
}

void HelloReader::TakeFds(int* maps_fd, int* mem_fd) {
  *maps_fd = !fds_.empty() ? fds_[0] : -1;
  *mem_fd = fds_.size() == 2 ? fds_[1] : -1;
  fds_.clear();
}

bool PeerIsServed(const ucred& peer) {
  const uid_t own = geteuid();
  return own == 0 || peer.uid == 0 || peer.uid == own;
}

bool MapsAreEmulated() {
  static const bool emulated = [] {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool copy = !IsProcFileOf(fd, getpid(), "maps") && IsMemfd(fd);
    close(fd);
    return copy;
  }();
  return emulated;
}

bool MapsAreProcessOwn(int maps_fd, int pid) {
  return IsProcFileOf(maps_fd, pid, "maps") || (MapsAreEmulated() && IsMemfd(maps_fd));
}

bool MemIsProcessOwn(int mem_fd, int pid) { return IsProcFileOf(mem_fd, pid, "mem"); }

const RegisterLayout* ClientLayout(const ClientHello& hello) {
  if (hello.size < offsetof(ClientHello, abi) + sizeof(hello.abi)) return &kNativeLayout;
  return LayoutOf(static_cast<Abi>(hello.abi));
}

bool SendReply(int sock, const DaemonReply& reply, const int* fds, size_t fd_count) {
  return SendWithFds(sock, &reply, sizeof(reply), fds, std::min<size_t>(fd_count, 3));
}

}  // namespace droidheap

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

HelloReader::~HelloReader() {
  for (int fd : fds_) close(fd);
}

HelloReader::Status HelloReader::Read(int sock) {
  while (received_ < wanted_) {
    bool truncated;
    // Whatever fds came are ours to close, whatever else is wrong with this read.
    const ssize_t n = ReceiveWithFds(sock, bytes_ + received_, wanted_ - received_, MSG_DONTWAIT,
                                     &truncated, [this](int fd) { fds_.push_back(fd); });
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Status::kNeedMore : Status::kBad;
    }
    if (n == 0 || truncated || fds_.size() > 2) return Status::kBad;
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

const RegisterLayout* ClientLayout(const ClientHello& hello) {
  if (hello.size < offsetof(ClientHello, abi) + sizeof(hello.abi)) return &kNativeLayout;
  return LayoutOf(static_cast<Abi>(hello.abi));
}

bool SendReply(int sock, const DaemonReply& reply, const int* fds, size_t fd_count) {
  return SendWithFds(sock, &reply, sizeof(reply), fds, std::min<size_t>(fd_count, 4));
}

}  // namespace droidheap

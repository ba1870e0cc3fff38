// Sending bytes with fds over a unix socket (SCM_RIGHTS), as both ends of the handshake do: the
// client its hello with its maps and mem fds, the daemon its reply with the shared memory's; and
// taking the fds a message brought. Allocates nothing: the client calls it before its hooks are
// in place, but it stays hook-safe.
#pragma once

#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

namespace droidheap {

constexpr size_t kMaxFdsSent = 16;

// Sends `size` bytes from `data` in one message with `fd_count` fds (at most kMaxFdsSent), with
// MSG_NOSIGNAL and `flags`. True when every byte went.
bool SendWithFds(int sock, const void* data, size_t size, const int* fds, size_t fd_count,
                 int flags = 0);

// Calls take(fd) for each fd that `msg` brought, `received` being what recvmsg() returned; none
// when it failed. The kernel then leaves msg_controllen as the caller set it, over a buffer it never
// wrote, and bionic's CMSG_NXTHDR returns a zeroed header itself (glibc's ends there): the walk
// would never end.
template <typename Take>
void ForEachReceivedFd(msghdr* msg, ssize_t received, Take take) {
  if (received < 0) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      take(fd);
    }
  }
}

}  // namespace droidheap

// Sending bytes with fds over a unix socket (SCM_RIGHTS), as both ends of the handshake and of the
// snapshot channel do: the client its hello with its maps and mem fds, the daemon its reply with
// the shared memory's, a snapshot's copy its own files; and receiving such a message, taking the
// fds it brought. Allocates nothing and takes no lock: the client calls it before its hooks are
// in place, and a forked copy whose other threads may hold any lock calls it too.
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
// when it failed. The kernel then leaves msg_controllen as the caller set it, over a buffer it
// never wrote, and bionic's CMSG_NXTHDR returns a zeroed header itself (glibc's ends there): the
// walk would never end.
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

// Receives up to `size` bytes into `data` with one recvmsg (`flags` | MSG_CMSG_CLOEXEC), with room
// for more fds than any message here carries, so that a peer sending too many is seen rather than
// cut off; calls take(fd) for each fd that came, whatever else is wrong with the read (they are
// the caller's to close). Returns what recvmsg returned; *truncated says the kernel cut the fds
// short (MSG_CTRUNC) all the same.
template <typename Take>
ssize_t ReceiveWithFds(int sock, void* data, size_t size, int flags, bool* truncated, Take take) {
  iovec iov{data, size};
  alignas(cmsghdr) char control[CMSG_SPACE((kMaxFdsSent + 1) * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  ForEachReceivedFd(&msg, n, take);
  *truncated = n >= 0 && (msg.msg_flags & MSG_CTRUNC) != 0;
  return n;
}

}  // namespace droidheap

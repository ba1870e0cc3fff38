#include "protocol/fd_passing.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <string.h>
#include <sys/socket.h>

namespace droidheap {

bool SendWithFds(int sock, const void* data, size_t size, const int* fds, size_t fd_count,
                 int flags) {
  if (fd_count > kMaxFdsSent) return false;
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFdsSent * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd_count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fd_count * sizeof(int));
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fd_count * sizeof(int));
    memcpy(CMSG_DATA(cmsg), fds, fd_count * sizeof(int));
  }
  // The system call itself: in an app bionic's sendmsg goes through libnetd_client's dispatch,
  // which the snapshot's forked copy (client/snapshot_thread.cc) must not enter.
  return syscall(SYS_sendmsg, sock, &msg, MSG_NOSIGNAL | flags) == static_cast<long>(size);
}

}  // namespace droidheap

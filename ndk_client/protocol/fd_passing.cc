#include "protocol/fd_passing.h"

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
  return sendmsg(sock, &msg, MSG_NOSIGNAL | flags) == static_cast<ssize_t>(size);
}

}  // namespace droidheap

// Sending bytes with fds over a unix socket (SCM_RIGHTS), as both ends of the handshake do: the
// client its hello with its maps and mem fds, the daemon its reply with the shared memory's.
// Allocates nothing: the client calls it before its hooks are in place, but it stays hook-safe.
#pragma once

#include <stddef.h>

namespace droidheap {

constexpr size_t kMaxFdsSent = 16;

// Sends `size` bytes from `data` in one message with `fd_count` fds (at most kMaxFdsSent), with
// MSG_NOSIGNAL and `flags`. True when every byte went.
bool SendWithFds(int sock, const void* data, size_t size, const int* fds, size_t fd_count,
                 int flags = 0);

}  // namespace droidheap

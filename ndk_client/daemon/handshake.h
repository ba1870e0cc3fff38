// The daemon's side of a client's handshake (wire_protocol.h): its hello and fds read without
// blocking, the peer checked, the reply sent.
//
// The daemon's main thread owns every handshake under way and polls their sockets beside its
// listening socket, so a client that says nothing, or says it a byte at a time, delays no other;
// each has a deadline. Everything a client sends is hostile until checked: lengths are bounded,
// extra fds are closed, and the fds it passes must be its own /proc/<pid>/maps and mem (the
// daemon reads another process only through fds that process sent, and only its own).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <vector>

#include "protocol/wire_protocol.h"
#include "unwinder/proc_files.h"
#include "unwinder/registers.h"

namespace droidheap {

// Longer hellos than this are not believed.
constexpr uint32_t kMaxHelloSize = 4096;

// Accumulates one hello from a non-blocking socket: the version 1 part first (it says how long
// the whole hello is, so an older client's shorter hello and a newer one's longer hello are both
// read exactly), then the rest, and the fds that came with any part. Fields the client did not
// send stay zero; parts of a newer hello this daemon does not know are read and dropped.
class HelloReader {
 public:
  enum class Status { kNeedMore, kDone, kBad };

  HelloReader() = default;
  ~HelloReader();
  HelloReader(const HelloReader&) = delete;
  HelloReader& operator=(const HelloReader&) = delete;

  // Reads what `sock` has now. kBad on end-of-file before the whole hello, a bad magic, version
  // or size, truncated or unexpected ancillary data, or more or fewer than two fds.
  Status Read(int sock);

  const ClientHello& hello() const { return hello_; }
  // Once kDone: the fds the client passed, which the caller then owns: its maps, and its mem
  // or -1 (a client that cannot open its /proc/self/mem sends the maps alone).
  void TakeFds(int* maps_fd, int* mem_fd);

 private:
  Status Check();

  ClientHello hello_{};
  uint8_t bytes_[kMaxHelloSize] = {};
  size_t received_ = 0;
  size_t wanted_ = kClientHelloV1Size;
  std::vector<int> fds_;
};

// Whether a peer with these credentials is served: one of the daemon's own uid, root, or, when
// the daemon itself runs as root (standing in for the platform's heapprofd), any process.
bool PeerIsServed(const ucred& peer);

// The register layout of the client's records: the ABI its hello names (every ABI in registers.h
// can be unwound here, whatever this daemon's own), the daemon's own for a version 1 hello;
// nullptr for an ABI this build does not know.
const RegisterLayout* ClientLayout(const ClientHello& hello);

// Sends `reply` with `fd_count` fds (0 to 4). False unless all of it went.
bool SendReply(int sock, const DaemonReply& reply, const int* fds, size_t fd_count);

}  // namespace droidheap

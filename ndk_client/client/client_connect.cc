// How a Client comes to be (client.h, Client::Connect): the hello to droidheapd with this
// process's maps and mem, the reply and the fds that come with it (the rings, the totals, the
// stack matches, the snapshot channel), and their mappings. On bionic's loading thread or at libc
// init, before the hooks are installed: what it allocates comes from the previous allocator.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <initializer_list>
#include <new>

#include "client/client.h"
#include "common/platform.h"
#include "protocol/fd_passing.h"

namespace droidheap {
namespace {

constexpr int kHandshakeTimeoutSeconds = 5;

bool SendHello(int sock, uint64_t flags) {
  ClientHello hello{kHelloMagic, kProtocolVersion, sizeof(ClientHello),
                    getpid(),    flags,            static_cast<uint32_t>(kNativeAbi), 0};
  int fds[2] = {open("/proc/self/maps", O_RDONLY | O_CLOEXEC),
                open("/proc/self/mem", O_RDONLY | O_CLOEXEC)};
  // Without its mem (a sandbox, a policy that denies it) the daemon unwinds the copied stacks
  // alone; without its maps nothing can be unwound.
  const bool ok = fds[0] >= 0 && SendWithFds(sock, &hello, sizeof(hello), fds, fds[1] >= 0 ? 2 : 1);
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  return ok;
}

// Receives the reply with its fds: the ring buffer's, then the totals' (version 4) when
// totals_size says so, then the stack matches' (version 10) when stack_matches_size does, then
// the snapshot channel (version 11) when the flags hold kFlagSnapshots; any extra fds are closed.
// The reply comes in one message: what an older daemon left out reads as zero.
struct ReceivedFds {
  int shmem = -1;
  int totals = -1;
  int stack_matches = -1;
  int snapshot_channel = -1;
};

bool ReceiveReply(int sock, DaemonReply* reply, ReceivedFds* fds) {
  memset(reply, 0, sizeof(*reply));
  constexpr size_t kMaxFds = 4;
  int received[kMaxFds] = {-1, -1, -1, -1};
  size_t count = 0;
  bool truncated;
  const ssize_t n = ReceiveWithFds(sock, reply, sizeof(*reply), 0, &truncated,
                                   [&received, &count](int fd) {
                                     if (count < kMaxFds) {
                                       received[count++] = fd;
                                     } else {
                                       close(fd);
                                     }
                                   });
  if (n < static_cast<ssize_t>(sizeof(*reply))) {
    memset(reinterpret_cast<char*>(reply) + (n > 0 ? n : 0), 0,
           sizeof(*reply) - static_cast<size_t>(n > 0 ? n : 0));
  }
  bool ok = n >= static_cast<ssize_t>(kDaemonReplyV3Size) && !truncated &&
            reply->magic == kReplyMagic && reply->version >= 1 &&
            reply->size >= kDaemonReplyV3Size && reply->status == kReplyAccepted &&
            received[0] >= 0 && reply->sampling_interval >= 1;
  size_t next = 0;
  if (ok) {
    fds->shmem = received[next++];
    if (reply->totals_size != 0) fds->totals = received[next++];
    if (reply->stack_matches_size != 0) fds->stack_matches = received[next++];
    if (reply->flags & kFlagSnapshots) fds->snapshot_channel = received[next++];
  }
  for (; next < kMaxFds; ++next) {
    if (received[next] >= 0) close(received[next]);
  }
  return ok;
}

}  // namespace

Client::Client(int sock, RingSet* rings, SampledAddresses* sampled,
               SampledAddresses* custom_sampled, SharedTotals* totals,
               const StackMatches* stack_matches, const DaemonReply& config,
               const ProcessIdentity& identity, const MallocDispatch* previous)
    : sock_(sock),
      rings_(rings),
      sampled_(sampled),
      custom_sampled_(custom_sampled),
      totals_(totals),
      stack_matches_(stack_matches),
      config_(config),
      identity_(identity),
      previous_(previous) {
  struct stat st {};
  fstat(sock, &st);
  sock_dev_ = st.st_dev;
  sock_ino_ = st.st_ino;
}

Client* Client::Connect(const char* socket_path, const MallocDispatch* previous,
                        uint64_t hello_flags) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(socket_path) >= sizeof(addr.sun_path)) return nullptr;
  strcpy(addr.sun_path, socket_path);
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return nullptr;
  timeval timeout{kHandshakeTimeoutSeconds, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  DaemonReply reply;
  ReceivedFds fds;
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      !SendHello(sock, hello_flags) || !ReceiveReply(sock, &reply, &fds)) {
    close(sock);
    return nullptr;
  }
  // An older daemon's one buffer is a set of one ring.
  const uint32_t ring_count = reply.ring_count != 0 ? reply.ring_count : 1;
  RingSet* rings = RingSet::Attach(fds.shmem, reply.shmem_size, ring_count);
  if (rings == nullptr) {
    for (int fd : {fds.shmem, fds.totals, fds.stack_matches, fds.snapshot_channel}) {
      if (fd >= 0) close(fd);
    }
    close(sock);
    return nullptr;
  }
  // Without totals the session goes on: the dumps then only lack them.
  SharedTotals* totals = fds.totals >= 0 ? SharedTotals::Attach(fds.totals, reply.totals_size)
                                         : nullptr;
  if (totals == nullptr && fds.totals >= 0) close(fds.totals);
  // Without stack matches every sample's stack is copied.
  StackMatches* stack_matches =
      fds.stack_matches >= 0 ? StackMatches::Attach(fds.stack_matches, reply.stack_matches_size)
                             : nullptr;
  if (stack_matches == nullptr && fds.stack_matches >= 0) close(fds.stack_matches);
  // Wake-up bytes must never block the program.
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  // Fresh anonymous pages are zero, the empty tables (libc's, the custom heaps', then their
  // large tables); only the buckets in use get touched.
  void* tables = mmap(nullptr, kSampledTablesBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* storage = previous->memalign(alignof(Client), sizeof(Client));
  if (tables == MAP_FAILED || storage == nullptr) {
    if (tables != MAP_FAILED) munmap(tables, kSampledTablesBytes);
    if (storage != nullptr) previous->free(storage);
    SharedTotals::Destroy(totals);
    StackMatches::Destroy(stack_matches);
    RingSet::Destroy(rings);
    if (fds.snapshot_channel >= 0) close(fds.snapshot_channel);
    close(sock);
    return nullptr;
  }
  SampledAddresses* sampled = static_cast<SampledAddresses*>(tables);
  SampledAddresses* custom_sampled = sampled + 1;
  auto* large_tables = reinterpret_cast<SampledAddresses::LargeTable*>(sampled + 2);
  sampled->SetLargeTableRoom(&large_tables[0]);
  custom_sampled->SetLargeTableRoom(&large_tables[1]);
  // Every block is sampled at interval 1: a lookup could only ever say "report it", and says where
  // to when a block's ring is not 0 (KeepRings).
  if (ring_count > 1) sampled->KeepRings();
  if (reply.sampling_interval <= 1) {
    sampled->ReportEveryFree();
    custom_sampled->ReportEveryFree();
  }
  reply.heap_names[sizeof(reply.heap_names) - 1] = '\0';  // the last name ends, whatever came
  ProcessIdentity identity;  // last: its page is never given back
  identity.Init();
  Client* client = new (storage) Client(sock, rings, sampled, custom_sampled, totals,
                                        stack_matches, reply, identity, previous);
  client->snapshot_channel_ = fds.snapshot_channel;
  return client;
}

}  // namespace droidheap

#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/clock.h"
#include "daemon/handshake.h"
#include "daemon/log.h"
#include "protocol/wire_protocol.h"

namespace droidheap {
namespace {

constexpr int kProfilingSignal = 36;  // bionic's BIONIC_SIGNAL_PROFILER
// A client has this long from its connect to the end of its hello.
constexpr uint64_t kHandshakeTimeoutMs = 2000;
// Handshakes under way at once; beyond it the oldest is given up (a flood of silent connections
// cannot keep a real client from its turn for long).
constexpr size_t kMaxPendingHandshakes = 64;

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  int saved = errno;
  char byte = static_cast<char>(sig);
  (void)!write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

// Reads what is waiting on standard input (the host sends nothing: anything is discarded); true at
// end-of-file or on an error that will not pass.
bool StdinClosed() {
  char buf[256];
  ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
  return n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
}

// How many rings a client's threads write to (ring_set.h): RingSet::kMaxRings, as --shmem-size
// divided among them allows (each must hold the largest record in half of it). More rings than
// cores still pay: threads move between cores, and a ring shared by two threads has its lines
// taken by one core from the other (4 threads on 2 cores: 2.67x the program's time with 2 rings,
// 2.49x with 8). One for a client older than protocol 13, and at -i 1 for one older than 15: it
// keeps no table of its blocks there (every block is sampled), and the table is what sends a
// block's free to its allocation's ring; every record then goes to one ring, in the order of the
// calls. From 15 it keeps the blocks of its rings other than 0 (4 threads @-i 1: 5.1x -> 3.9x).
uint32_t RingCount(const DaemonConfig& config, uint32_t client_version) {
  if (client_version < 13 || (client_version < 15 && config.sampling_interval <= 1)) return 1;
  const uint64_t page_size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint32_t count = RingSet::kMaxRings;
  while (count > 1 && (config.shmem_size / count / 2 < config.LargestRecordBytes() ||
                       config.shmem_size / count < page_size)) {
    count /= 2;
  }
  return count;
}

// The heaps the session records, as the client reads them (wire_protocol.h). main.cc made sure
// the names fit.
void SelectHeaps(const DaemonConfig& config, DaemonReply* reply) {
  if (!config.RecordsMalloc()) reply->heap_flags |= kHeapsSkipMalloc;
  if (config.all_heaps) reply->heap_flags |= kHeapsAllCustom;
  size_t at = 0;
  for (const std::string& name : config.heaps) {
    if (at + name.size() + 2 > sizeof(reply->heap_names)) break;
    memcpy(reply->heap_names + at, name.c_str(), name.size() + 1);
    at += name.size() + 1;
  }
}

}  // namespace

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)),
      matcher_(config_.pids, config_.spawned_pids, config_.names, config_.all,
               config_.profile_forked_children),
      descendants_(config_.spawned_pids) {}

Daemon::~Daemon() {
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int fd : inbox_pipe_) {
    if (fd >= 0) close(fd);
  }
}

bool Daemon::Listen() {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (config_.socket_path.size() >= sizeof(addr.sun_path)) {
    Log("socket path too long: %s", config_.socket_path.c_str());
    return false;
  }
  strcpy(addr.sun_path, config_.socket_path.c_str());
  unlink(config_.socket_path.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    Log("cannot listen on %s: %s", config_.socket_path.c_str(), strerror(errno));
    return false;
  }
  // As root the daemon stands in for the platform's heapprofd and apps of every uid connect;
  // otherwise only its own uid is served (PeerIsServed), and no other user may even connect.
  chmod(config_.socket_path.c_str(), geteuid() == 0 ? 0666 : 0600);
  return true;
}

void Daemon::SignalTargets() {
  for (int pid : config_.pids) {
    sigval value{};
    value.sival_int = 0;
    if (sigqueue(pid, kProfilingSignal, value) == 0) {
      signalled_pids_.push_back(pid);
      Log("signalled pid=%d", pid);
    } else {
      Log("cannot signal pid=%d: %s", pid, strerror(errno));
    }
  }
}

void Daemon::AcceptClients() {
  for (;;) {
    const int sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (sock < 0) return;
    if (pending_clients_.size() >= kMaxPendingHandshakes) {
      Log("too many handshakes under way: giving up the oldest");
      pending_clients_.erase(pending_clients_.begin());
    }
    auto pending = std::make_unique<PendingClient>();
    pending->sock = sock;
    pending->deadline_ms = MonotonicUs() / 1000 + kHandshakeTimeoutMs;
    pending_clients_.push_back(std::move(pending));
  }
}

void Daemon::ContinueHandshakes(const std::vector<pollfd>& polled, size_t first) {
  const uint64_t now_ms = MonotonicUs() / 1000;
  std::vector<std::unique_ptr<PendingClient>> still_pending;
  for (size_t i = 0; i < pending_clients_.size(); ++i) {
    std::unique_ptr<PendingClient>& pending = pending_clients_[i];
    // Clients accepted after the poll have no entry yet: they are read on the next round.
    const bool ready = first + i < polled.size() && polled[first + i].revents != 0;
    HelloReader::Status status = ready ? pending->reader.Read(pending->sock)
                                       : HelloReader::Status::kNeedMore;
    if (status == HelloReader::Status::kNeedMore && now_ms >= pending->deadline_ms) {
      Log("a client said nothing in %llu ms: closed",
          static_cast<unsigned long long>(kHandshakeTimeoutMs));
      continue;
    }
    if (status == HelloReader::Status::kNeedMore) {
      still_pending.push_back(std::move(pending));
    } else if (!stopping_) {
      FinishHandshake(std::move(pending), status == HelloReader::Status::kDone);
    }
  }
  pending_clients_ = std::move(still_pending);
}

uint64_t Daemon::NextHandshakeDeadlineMs() const {
  uint64_t next = 0;
  for (const auto& pending : pending_clients_) {
    if (next == 0 || pending->deadline_ms < next) next = pending->deadline_ms;
  }
  return next;
}

void Daemon::FinishHandshake(std::unique_ptr<PendingClient> pending, bool hello_read) {
  auto client = std::make_unique<ClientConnection>();
  client->sock = pending->sock;
  pending->sock = -1;
  const int sock = client->sock;
  const ClientHello& hello = pending->reader.hello();
  if (hello_read) pending->reader.TakeFds(&client->maps_fd, &client->mem_fd);
  ucred cred{};
  socklen_t cred_len = sizeof(cred);
  const bool known_peer = getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0;
  DaemonReply reply{};
  reply.magic = kReplyMagic;
  reply.version = kProtocolVersion;
  reply.size = sizeof(reply);
  const bool hello_ok = hello_read && known_peer && MapsAreProcessOwn(client->maps_fd, cred.pid);
  if (hello_ok && !MemIsProcessOwn(client->mem_fd, cred.pid)) {
    // Only the stacks the client copies can be read then: an unwind that needs more stops early.
    Log("pid=%d sent no readable /proc/%d/mem of its own: stacks are unwound from their copies "
        "alone", cred.pid, cred.pid);
    if (client->mem_fd >= 0) close(client->mem_fd);
    client->mem_fd = -1;
  }
  const RegisterLayout* layout = hello_ok ? ClientLayout(hello) : nullptr;
  if (!hello_ok) {
    reply.status = kReplyBadHello;
  } else if (!PeerIsServed(cred)) {
    reply.status = kReplyNotPermitted;
    Log("pid=%d runs as uid %u: droidheapd (uid %u) serves its own uid and root only", cred.pid,
        static_cast<unsigned>(cred.uid), static_cast<unsigned>(geteuid()));
  } else if (!matcher_.IsTarget(cred.pid)) {
    reply.status = kReplyNotATarget;
  } else if (layout == nullptr) {
    reply.status = kReplyUnsupportedAbi;
    Log("pid=%d runs an ABI unknown to this droidheapd (%s): number %u", cred.pid,
        kNativeLayout.name, hello.abi);
  } else {
    client->layout = layout;
    client->version = hello.version;
    // A client of protocol 8 or older writes version 2's records (under its lock). --shmem-size
    // is the whole set's.
    const uint32_t rings = RingCount(config_, hello.version);
    client->rings.reset(RingSet::Create(
        rings, config_.shmem_size / rings,
        hello.version >= 9 ? kRingBufferVersion : kRingBufferVersion2));
    // Protocol 5 made the totals larger (a slot per custom heap): an older client would refuse
    // them and leave them at zero.
    const bool counts = hello.version >= 5 && config_.exact_totals;
    if (counts) client->totals.reset(SharedTotals::Create());
    // Without them the client copies every stack: slower, as exact. An older client reads the
    // slots' words at other places (protocol 14).
    if (hello.version >= 14) client->stack_matches.reset(StackMatches::Create());
    if (!client->rings || (counts && !client->totals)) {
      reply.status = kReplyDaemonBusy;
    }
    // Read the maps now, while the client waits for this reply: a short-lived process may be gone
    // (its maps empty) before its first record is unwound. Its program too: once answered, it may
    // exec at once (a forked child), and ExecedFrom must compare the new program with the old.
    if (MapsAreEmulated()) client->maps.SetHostViewPid(cred.pid);
    client->maps.Reload(client->maps_fd);
    client->cmdline = ProcessMatcher::ReadCmdline(cred.pid);
    client->exe = ProcessMatcher::ReadExe(cred.pid);
  }
  client->pid = cred.pid;  // the kernel's word, not the client's
  int fds[4] = {-1, -1, -1, -1};
  size_t fd_count = 0;
  // The snapshot channel (--unreachable): the daemon's end, the client's.
  int channel[2] = {-1, -1};
  if (reply.status == kReplyAccepted) {
    reply.sampling_interval = config_.sampling_interval;
    reply.max_stack_bytes = config_.max_stack_bytes;
    // Before version 3 the field held milliseconds.
    reply.block_timeout_us = hello.version >= 3 ? config_.block_timeout_us
                                                : (config_.block_timeout_us + 999) / 1000;
    reply.flags = (config_.block_client ? uint32_t{kFlagBlockClient} : 0u) |
                  (config_.profile_forked_children ? uint32_t{kFlagDisableForkTeardown} : 0u);
    reply.shmem_size = client->rings->total_size();
    reply.ring_count = client->rings->count();
    reply.random_seed = config_.random_seed ? config_.random_seed : BoottimeNs() | 1;
    SelectHeaps(config_, &reply);
    fds[fd_count++] = client->rings->fd();
    if (client->totals) {
      reply.totals_size = SharedTotals::kSize;
      fds[fd_count++] = client->totals->fd();
    }
    if (client->stack_matches) {
      reply.stack_matches_size = StackMatches::kSize;
      fds[fd_count++] = client->stack_matches->fd();
    }
    if (config_.find_unreachable && hello.version >= 11 &&
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) == 0) {
      reply.flags |= kFlagSnapshots;
      fds[fd_count++] = channel[1];
      client->snapshots = std::make_unique<SnapshotChannel>(channel[0]);
    }
  }
  const bool sent = SendReply(sock, reply, fds, fd_count);
  if (channel[1] >= 0) close(channel[1]);
  if (reply.status != kReplyAccepted || !sent) {
    Log("rejected pid=%d status=%u", client->pid, reply.status);
    return;
  }
  client->start_timestamp_ns = MonotonicCoarseNs();
  // A process signalled while it ran, or forked from a profiled one, frees blocks its session
  // never saw allocated.
  const bool forked = hello.version >= 8 && (hello.flags & kHelloForked) != 0;
  client->from_startup = !forked && std::find(signalled_pids_.begin(), signalled_pids_.end(),
                                              client->pid) == signalled_pids_.end();
  Log("connected pid=%d abi=%s cmdline=%s", client->pid, client->layout->name,
      client->cmdline.c_str());
  // A client of protocol 6 says when it records (kRecordRecording); an older one does so as soon
  // as it has the reply.
  if (hello.version < 6) Log("recording pid=%d", client->pid);
  if (client->layout->has_ehabi) {
    Log("pid=%d: %s stacks are unwound with DWARF CFI, ARM EHABI tables (.ARM.exidx) and frame "
        "pointers (r7)", client->pid, client->layout->name);
  }
  ++clients_connected_;
  matcher_.Accepted(client->pid);
  workers_[next_worker_++ % workers_.size()]->PostAddClient(std::move(client));
}

void Daemon::PostSnapshots(uint64_t request_id, std::vector<DumpSnapshot> snapshots) {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.emplace_back(request_id, std::move(snapshots));
  }
  char byte = 's';
  (void)!write(inbox_pipe_[1], &byte, 1);
}

void Daemon::RequestDump(bool stop) {
  stopping_ = stopping_ || stop;
  if (pending_request_ != 0) {
    // One dump at a time; a stop waits for the dump under way and then takes its own.
    stop_queued_ = stop_queued_ || stop;
    return;
  }
  pending_request_ = next_request_id_++;
  pending_replies_ = workers_.size();
  pending_is_stop_ = stop;
  pending_snapshots_.clear();
  uint64_t now = MonotonicCoarseNs();
  for (auto& worker : workers_) {
    if (stop) {
      worker->PostStop(pending_request_, now);
    } else {
      worker->PostDump(pending_request_, now);
    }
  }
}

void Daemon::HandleInbox() {
  char drain[64];
  while (read(inbox_pipe_[0], drain, sizeof(drain)) > 0) {
  }
  std::vector<std::pair<uint64_t, std::vector<DumpSnapshot>>> inbox;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox.swap(inbox_);
  }
  for (auto& [request_id, snapshots] : inbox) {
    if (request_id == 0) {
      for (const auto& s : snapshots) {
        // What its samples cost (bench/overhead.py): the stacks sent, and those unwound.
        Log("samples pid=%d: %llu, %llu matched by the process, %llu unwound, the rest cached",
            s.pid, static_cast<unsigned long long>(s.heap_samples),
            static_cast<unsigned long long>(s.matched_samples),
            static_cast<unsigned long long>(s.unwound_samples));
        if (s.hit_guardrail) {
          Log("warning: pid=%d: droidheapd's bookkeeping of the session passed its memory cap "
              "(%llu bytes): this process's profile ends here", s.pid,
              static_cast<unsigned long long>(config_.max_memory_bytes));
          Log("profile ended pid=%d", s.pid);
        } else if (s.stalled) {
          Log("profile ended pid=%d: cut off", s.pid);
        } else if (s.buffer_overran || s.buffer_corrupted) {
          Log("profile ended pid=%d: the buffer %s", s.pid,
              s.buffer_overran ? "overran" : "was corrupted");
        } else if (s.exited) {
          Log("process exited pid=%d", s.pid);
        } else if (s.execed) {
          Log("process exec'd pid=%d", s.pid);
        } else {
          Log("connection lost pid=%d", s.pid);
        }
      }
      clients_gone_ += snapshots.size();
      WriteDump(snapshots);
      continue;
    }
    if (request_id != pending_request_) continue;
    for (auto& s : snapshots) pending_snapshots_.push_back(std::move(s));
    if (--pending_replies_ > 0) continue;
    if (pending_snapshots_.empty() || WriteDump(pending_snapshots_)) {
      Log("dump written processes=%zu", pending_snapshots_.size());
    }
    pending_snapshots_.clear();
    pending_request_ = 0;
    if (pending_is_stop_) {
      stopped_ = true;
    } else if (stop_queued_) {
      stop_queued_ = false;
      RequestDump(true);
    }
  }
}

bool Daemon::WriteDump(const std::vector<DumpSnapshot>& snapshots) {
  if (trace_.WriteDump(snapshots)) return true;
  if (!trace_.full()) {
    Log("cannot write the trace");
  } else if (!trace_full_) {
    trace_full_ = true;
    Log("warning: the trace reached its size cap (%llu bytes): the dumps written before are "
        "kept, no later one is; profiling stops",
        static_cast<unsigned long long>(config_.max_trace_bytes));
    RequestDump(true);
  }
  return false;
}

void Daemon::LogUnconnectedDescendants() const {
  constexpr size_t kMaxLogged = 64;
  const auto unconnected = descendants_.Unconnected(matcher_.accepted());
  for (size_t i = 0; i < unconnected.size() && i < kMaxLogged; ++i) {
    Log("descendant never connected pid=%d cmdline=%s", unconnected[i].pid,
        unconnected[i].cmdline.c_str());
  }
  if (unconnected.size() > kMaxLogged) {
    Log("descendants never connected: %zu more", unconnected.size() - kMaxLogged);
  }
}

int Daemon::Run() {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
      pipe2(inbox_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    Log("cannot create pipes: %s", strerror(errno));
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGUSR1, SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  trace_.set_max_bytes(config_.max_trace_bytes);
  if (!trace_.Open(config_.output_path) || !trace_.WriteSessionStart()) {
    Log("cannot write %s", config_.output_path.c_str());
    return 1;
  }
  // Listen first: a daemon that cannot listen must exit at once, with no workers to wind down.
  if (!Listen()) return 1;
  for (int i = 0; i < std::max(1, config_.workers); ++i) {
    workers_.push_back(std::make_unique<UnwindingWorker>(config_, this, &session_bytes_));
    if (!workers_.back()->Start()) {
      Log("cannot start a worker");
      workers_.pop_back();
      for (auto& worker : workers_) worker->PostStop(0, 0);  // nothing booked yet; joined on exit
      return 1;
    }
  }
  Log("listening socket=%s", config_.socket_path.c_str());
  SignalTargets();

  bool watch_stdin = config_.stop_when_stdin_closes;
  uint64_t next_periodic_ms =
      config_.dump_interval_ms ? MonotonicUs() / 1000 + config_.dump_interval_ms : 0;
  while (!stopped_) {
    uint64_t wake_ms = NextHandshakeDeadlineMs();
    for (uint64_t due_ms : {next_periodic_ms, stopping_ ? 0 : descendants_.NextLookMs()}) {
      if (due_ms && (wake_ms == 0 || due_ms < wake_ms)) wake_ms = due_ms;
    }
    int timeout_ms = -1;
    if (wake_ms) {
      const uint64_t now_ms = MonotonicUs() / 1000;
      timeout_ms =
          now_ms >= wake_ms ? 0 : static_cast<int>(std::min<uint64_t>(wake_ms - now_ms, 60000));
    }
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {g_signal_pipe[0], POLLIN, 0},
                               {inbox_pipe_[0], POLLIN, 0},
                               {watch_stdin ? STDIN_FILENO : -1, POLLIN, 0}};
    constexpr size_t kFirstHandshake = 4;
    for (const auto& pending : pending_clients_) fds.push_back({pending->sock, POLLIN, 0});
    poll(fds.data(), fds.size(), timeout_ms);
    if (fds[2].revents & POLLIN) HandleInbox();
    if (fds[3].revents != 0 && StdinClosed()) {
      watch_stdin = false;
      if (!stopping_) {
        Log("standard input closed: stopping");
        RequestDump(true);
      }
    }
    if (fds[1].revents & POLLIN) {
      char sig;
      while (read(g_signal_pipe[0], &sig, 1) > 0) {
        if (sig == SIGUSR1) {
          Log("dump requested");
          RequestDump(false);
        } else if (!stopping_) {
          Log("stopping");
          RequestDump(true);
        }
      }
    }
    ContinueHandshakes(fds, kFirstHandshake);
    if (!stopping_ && (fds[0].revents & POLLIN)) AcceptClients();
    const uint64_t look_ms = stopping_ ? 0 : descendants_.NextLookMs();
    if (look_ms && MonotonicUs() / 1000 >= look_ms) descendants_.Look(MonotonicUs() / 1000);
    if (next_periodic_ms && MonotonicUs() / 1000 >= next_periodic_ms) {
      next_periodic_ms += config_.dump_interval_ms;
      if (!stopping_) RequestDump(false);
    }
    if (config_.exit_when_clients_gone && !stopping_ && clients_connected_ > 0 &&
        clients_gone_ == clients_connected_) {
      Log("all clients gone");
      RequestDump(true);
    }
  }
  for (auto& worker : workers_) worker->Join();
  LogUnconnectedDescendants();
  trace_.Close();
  unlink(config_.socket_path.c_str());
  // What the session cost the phone, for the log and the benchmarks (bench/overhead.py).
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  Log("stopped: cpu user %.3f s system %.3f s, peak RSS %ld KiB",
      static_cast<double>(usage.ru_utime.tv_sec) + usage.ru_utime.tv_usec / 1e6,
      static_cast<double>(usage.ru_stime.tv_sec) + usage.ru_stime.tv_usec / 1e6,
      static_cast<long>(usage.ru_maxrss));
  return 0;
}

}  // namespace droidheap

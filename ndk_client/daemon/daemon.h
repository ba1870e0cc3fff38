// droidheapd's main thread: listens for clients, performs their handshakes (without blocking),
// signals running targets, decides when to dump (SIGUSR1, every --dump-interval-ms, at stop) and owns the TraceWriter.
// Clients are handed to UnwindingWorkers after the handshake; their snapshots come back through
// PostSnapshots (the only method called from other threads).
#pragma once

#include <poll.h>
#include <stdint.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "daemon/daemon_config.h"
#include "daemon/descendant_watch.h"
#include "daemon/handshake.h"
#include "daemon/process_matcher.h"
#include "daemon/trace_writer.h"
#include "daemon/unwinding_worker.h"

namespace droidheap {

class Daemon : public SnapshotSink {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon() override;
  // Runs until SIGTERM/SIGINT (or, with exit_when_clients_gone, until the last client left).
  // Returns the process exit code.
  int Run();

  void PostSnapshots(uint64_t request_id, std::vector<DumpSnapshot> snapshots) override;

 private:
  bool Listen();
  void SignalTargets();
  // A client whose handshake is under way (handshake.h).
  struct PendingClient {
    ~PendingClient() {
      if (sock >= 0) close(sock);
    }
    int sock = -1;
    uint64_t deadline_ms = 0;  // MonotonicUs() / 1000
    HelloReader reader;
  };
  // Accepts every client waiting on the listening socket, to be read as they send.
  void AcceptClients();
  // Reads what the pending clients polled[first..] stand for sent; finishes those done, gives up
  // those past their deadline.
  void ContinueHandshakes(const std::vector<pollfd>& polled, size_t first);
  // Checks the client and its hello, answers it and, accepted, hands it to a worker.
  void FinishHandshake(std::unique_ptr<PendingClient> pending, bool hello_read);
  // The earliest deadline of a pending handshake; 0 when none is under way.
  uint64_t NextHandshakeDeadlineMs() const;
  void RequestDump(bool stop);
  void HandleInbox();
  // Writes a dump to the trace; a trace at its size cap stops the session, once, saying so.
  bool WriteDump(const std::vector<DumpSnapshot>& snapshots);
  // Logs what the spawned programs' descendants ran that never connected.
  void LogUnconnectedDescendants() const;

  const DaemonConfig config_;
  ProcessMatcher matcher_;
  DescendantWatch descendants_;
  TraceWriter trace_;
  // What the workers' bookkeeping takes, against config_.max_memory_bytes.
  std::atomic<uint64_t> session_bytes_{0};
  std::vector<std::unique_ptr<UnwindingWorker>> workers_;
  int listen_fd_ = -1;
  size_t next_worker_ = 0;
  std::vector<int> signalled_pids_;
  std::vector<std::unique_ptr<PendingClient>> pending_clients_;

  // Dump bookkeeping (main thread).
  uint64_t next_request_id_ = 1;
  uint64_t pending_request_ = 0;
  size_t pending_replies_ = 0;
  bool pending_is_stop_ = false;
  bool stop_queued_ = false;
  bool stopping_ = false;  // no new clients, no new periodic dumps
  bool stopped_ = false;   // the final dump is written
  bool trace_full_ = false;  // at --max-trace-size: said once, and the session stops
  std::vector<DumpSnapshot> pending_snapshots_;
  size_t clients_connected_ = 0;
  size_t clients_gone_ = 0;

  // Inbox from the workers.
  int inbox_pipe_[2] = {-1, -1};
  std::mutex inbox_mutex_;
  std::vector<std::pair<uint64_t, std::vector<DumpSnapshot>>> inbox_;  // guarded by inbox_mutex_
};

}  // namespace droidheap

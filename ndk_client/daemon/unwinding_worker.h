// A thread that owns a group of clients: it drains their ring buffers, each record's sample
// unwound and booked in the client's HeapTracker by its SampleBooker (seed 000: the unwinder
// threads), and takes their dumps; with --unreachable it takes their snapshots and books what its
// UnreachableSweeper found. Other threads talk to it only through the Post* methods, which queue
// a task and wake its poll loop. Results (dump snapshots) go back through the SnapshotSink, on the
// worker's thread.
//
// Every client is hostile, and any of them may keep its buffer full for ever: no drain reads a
// client "until empty". Each round gives each client a share of the worker (DrainBudgets); a dump
// reads each client up to its mark, what it had written when the dump was asked, and a closed
// client up to what it had written when it went, each within a budget of the worker's time. A
// client that cannot be read up to its mark within its budget is cut off, its profile ended
// (DumpSnapshot::buffer_overran), and the others and the dump go on.
#pragma once

#include <stdint.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/client_connection.h"
#include "daemon/daemon_config.h"
#include "daemon/drain_budgets.h"
#include "daemon/dump_snapshot.h"
#include "daemon/sample_booker.h"
#include "daemon/unreachable_sweeper.h"

namespace droidheap {

class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  // request_id 0: an unsolicited dump (a process went away). Called on a worker thread.
  virtual void PostSnapshots(uint64_t request_id, std::vector<DumpSnapshot> snapshots) = 0;
};

class UnwindingWorker {
 public:
  // `session_bytes`: what every worker's bookkeeping takes, against config.max_memory_bytes.
  UnwindingWorker(const DaemonConfig& config, SnapshotSink* sink,
                  std::atomic<uint64_t>* session_bytes, DrainBudgets budgets = DrainBudgets());
  ~UnwindingWorker();
  bool Start();

  // Any thread.
  void PostAddClient(std::unique_ptr<ClientConnection> client);
  // Snapshots every client (once read up to what it had written now, or cut off) and answers
  // with request_id.
  void PostDump(uint64_t request_id, uint64_t timestamp_ns);
  // Like PostDump, then the thread ends; Join() waits for it.
  void PostStop(uint64_t request_id, uint64_t timestamp_ns);
  void Join();

 private:
  void Run();
  void PostTask(std::function<void()> task);
  void RunTasks();
  // Reads wake-up bytes; notes EOF.
  void ReadSocket(ClientConnection* client);
  // What one drain of a client may take: records, the worker's time (until deadline_us, on
  // MonotonicUs) and bytes (it stops once each ring is read up to *until; nullptr: no mark).
  struct DrainLimits {
    size_t max_records;
    uint64_t deadline_us;
    const RingBytes* until = nullptr;
  };
  // One round's limits, from `now_us`.
  DrainLimits RoundLimits(uint64_t now_us) const;
  // True when the client is done for now: each of its rings is empty (or holds a record not yet
  // committed) or read up to the mark, or it is cut off; false when a limit stopped it.
  // Adds the time it took to *spent.
  bool Drain(ClientConnection* client, const DrainLimits& limits, DrainTime* spent = nullptr);
  // Its rings in turn, from next_ring.
  bool DrainRecords(ClientConnection* client, const DrainLimits& limits);
  // One ring: kDone when it is empty, waits for a commit or reached its mark; kCutOff when the
  // client was cut off; kStopped when a limit (or a sample put off) stopped the drain. `records`
  // counts down the drain's share of records.
  enum class RingDrained { kDone, kCutOff, kStopped };
  RingDrained DrainRing(ClientConnection* client, uint32_t ring, const DrainLimits& limits,
                        size_t* records);
  // Books one record read from `ring`; false when a sample was put off (not consumed).
  bool HandleRecord(ClientConnection* client, uint32_t ring,
                    const SharedRingBuffer::RecordView& record);
  // A client whose socket closed, read up to its last mark within its budget; true once it is
  // done and its final dump is due.
  bool DrainClosing(ClientConnection* client);
  // Ends the profile of a client that kept the worker from reading up to `mark` in time.
  void Stall(ClientConnection* client, const char* mark, uint64_t budget_us);
  // Counts what the client's bookkeeping takes now into the session's; past the cap, ends its
  // profile (its last dump follows, marked hit_guardrail) and returns true.
  bool OverMemoryCap(ClientConnection* client);
  // Ends a client's profile: it sees its socket close and stops recording.
  void CutOff(ClientConnection* client);
  void DumpAll(uint64_t request_id, uint64_t timestamp_ns);
  // Books the sweeps the sweeper finished in their clients (--unreachable).
  void BookSweeps();

  const DaemonConfig config_;
  SnapshotSink* const sink_;
  std::atomic<uint64_t>* const session_bytes_;
  const DrainBudgets budgets_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  // --unreachable: sweeps the clients' snapshots on a thread of its own.
  std::unique_ptr<UnreachableSweeper> sweeper_;

  std::mutex tasks_mutex_;
  std::vector<std::function<void()>> tasks_;  // guarded by tasks_mutex_

  // Owned by the worker thread.
  std::vector<std::unique_ptr<ClientConnection>> clients_;
  // Unwinds and books each record's sample; its ElfCache counts into session_bytes_.
  SampleBooker booker_;
  uint64_t elf_cache_booked_ = 0;  // of the booker's ElfCache's bytes, in session_bytes_
  // A drain of the last round stopped at a limit: the next poll does not wait.
  bool behind_ = false;
  // A drain of the last round stopped at a record still being written: the next poll waits
  // kCommitWaitMs, not the full kPollTimeoutMs (nothing wakes the worker for it).
  bool awaiting_commit_ = false;
  bool stopping_ = false;
};

}  // namespace droidheap

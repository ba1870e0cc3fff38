// A thread that owns a group of clients: it drains their ring buffers, unwinds each sampled
// allocation and books it in the client's HeapTracker (seed 000: the unwinder threads). Other
// threads talk to it only through the Post* methods, which queue a task and wake its poll loop.
// Results (dump snapshots) go back through the SnapshotSink, on the worker's thread.
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
#include "daemon/dump_snapshot.h"
#include "unwinder/dwarf_unwinder.h"
#include "unwinder/elf_info.h"

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
                  std::atomic<uint64_t>* session_bytes);
  ~UnwindingWorker();
  bool Start();

  // Any thread.
  void PostAddClient(std::unique_ptr<ClientConnection> client);
  // Snapshots every client (after draining its buffer) and answers with request_id.
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
  // Handles at most max_records records; true when the buffer is (for now) empty.
  bool Drain(ClientConnection* client, size_t max_records);
  bool DrainRecords(ClientConnection* client, size_t max_records);
  // Counts what the client's bookkeeping takes now into the session's; past the cap, ends its
  // profile (its last dump follows, marked hit_guardrail) and returns true.
  bool OverMemoryCap(ClientConnection* client);
  // Ends a client's profile: it sees its socket close and stops recording.
  void CutOff(ClientConnection* client);
  void HandleAlloc(ClientConnection* client, HeapTracker* heap, const uint8_t* body, size_t size);
  // `regs` indexed by register number; `sequence` the sample's, for the stack log.
  uint32_t UnwindAndIntern(ClientConnection* client, uint64_t sequence, const uint64_t* regs,
                           uint64_t stack_top, StackMemory* memory);
  // The custom heap a kRecordHeap* record is for (the HeapTag at its start); nullptr when the
  // client never named it.
  HeapTracker* CustomHeapOf(ClientConnection* client, const uint8_t* body, size_t size);
  void NameCustomHeap(ClientConnection* client, const uint8_t* body, size_t size);
  void HandleFree(HeapTracker* heap, const uint8_t* body, size_t size);
  // The callstacks' mapping index for `map` (ClientConnection::kProfilerMapping for our own).
  uint32_t MappingId(ClientConnection* client, const MapEntry& map);
  void LogStack(const ClientConnection& client, uint64_t sequence, const std::vector<uint64_t>& pcs,
                UnwindError error);
  DumpSnapshot TakeSnapshot(ClientConnection* client, uint64_t timestamp_ns);
  void DumpAll(uint64_t request_id, uint64_t timestamp_ns);

  const DaemonConfig config_;
  SnapshotSink* const sink_;
  std::atomic<uint64_t>* const session_bytes_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;

  std::mutex tasks_mutex_;
  std::vector<std::function<void()>> tasks_;  // guarded by tasks_mutex_

  // Owned by the worker thread.
  std::vector<std::unique_ptr<ClientConnection>> clients_;
  ElfCache elf_cache_;
  DwarfUnwinder unwinder_{&elf_cache_};
  int stack_log_fd_ = -1;
  // HandleAlloc's scratch, kept across samples to keep their capacity.
  UnwindResult unwound_;
  std::vector<FrameInfo> frames_;
  UnwindInputs unwind_inputs_;
  std::vector<uint64_t> booked_pcs_;
  bool stopping_ = false;
};

}  // namespace droidheap

// The daemon's reading of a snapshot copy's list of its heap's blocks (SnapshotBlocks messages,
// protocol/snapshot_channel.h): hostile input, message by message. Messages of other requests,
// of the wrong size or that claim too many blocks are skipped; a block that wraps is no block; the
// list ends at its last message, or fails (the allocator would not list, more blocks than the
// daemon takes). Owned by whoever reads the channel; not thread-safe.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "protocol/snapshot_channel.h"
#include "reachability/heap_sweep.h"

namespace droidheap {

class BlockList {
 public:
  enum class Status { kMore, kDone, kFailed };

  // For request `id`, at most `max_blocks` blocks.
  BlockList(uint64_t id, size_t max_blocks) : id_(id), max_blocks_(max_blocks) {}

  // One message as recv(MSG_TRUNC) gave it: `received` is its whole size, of which `message`
  // holds what fits.
  Status Add(const SnapshotBlocks& message, size_t received);

  std::vector<HeapBlock>& blocks() { return blocks_; }
  // Why the list failed; empty unless Add said kFailed.
  const std::string& why_not() const { return why_not_; }

 private:
  const uint64_t id_;
  const size_t max_blocks_;
  std::vector<HeapBlock> blocks_;
  std::string why_not_;
};

}  // namespace droidheap

#include "reachability/block_list.h"

#include <string.h>

namespace droidheap {

BlockList::Status BlockList::Add(const SnapshotBlocks& message, size_t received) {
  if (received != sizeof(message) || message.magic != kSnapshotMagic ||
      message.size != sizeof(message) || message.id != id_ || message.count > kBlocksPerMessage) {
    return Status::kMore;  // an earlier listing's, given up on, or damage
  }
  if ((message.flags & kBlocksUnsupported) != 0) {
    why_not_ = std::string("its allocator would not list its blocks: ") + strerror(message.error);
    return Status::kFailed;
  }
  if (blocks_.size() + message.count > max_blocks_) {
    why_not_ = "its heap has more than " + std::to_string(max_blocks_) + " blocks";
    return Status::kFailed;
  }
  for (uint32_t i = 0; i < message.count; ++i) {
    const SnapshotRange& block = message.blocks[i];
    if (block.end >= block.start) blocks_.push_back({block.start, block.end - block.start});
  }
  return (message.flags & kBlocksLast) != 0 ? Status::kDone : Status::kMore;
}

}  // namespace droidheap

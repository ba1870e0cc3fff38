// A snapshot copy's list of blocks (reachability/block_list.h) as any process may send it: the
// input is a sequence of messages, each of the size the sender picks (short, exact, longer:
// recv(MSG_TRUNC) says the whole), its header and blocks as given, for the request asked or
// another. Whatever arrives, the list never holds more than its bound, no block wraps, it is done
// only at a message of its own request marked last, and a failure says why.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <memory>

#include "fuzz/fuzz_input.h"
#include "reachability/block_list.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using droidheap::BlockList;
  using droidheap::SnapshotBlocks;
  droidheap::FuzzInput input(data, size);
  const uint64_t id = input.Take<uint8_t>() % 4;
  const size_t max_blocks = input.Take<uint16_t>() % 5000;
  BlockList list(id, max_blocks);
  auto message = std::make_unique<SnapshotBlocks>();
  BlockList::Status status = BlockList::Status::kMore;
  while (input.remaining() > 0 && status == BlockList::Status::kMore) {
    // How the message is sent: its size as received, whether its header is made genuine (most
    // are, so that the blocks are read), and how many bytes of it the input gives.
    const uint8_t shape = input.Take<uint8_t>();
    const size_t received = shape % 8 == 0 ? input.Take<uint16_t>() : sizeof(SnapshotBlocks);
    memset(message.get(), 0, sizeof(*message));
    size_t got;
    const uint8_t* bytes = input.TakeBytes(input.Take<uint16_t>() % 2048, &got);
    memcpy(message.get(), bytes, got);
    if (shape & 0x10) {
      message->magic = droidheap::kSnapshotMagic;
      message->version = droidheap::kSnapshotVersion;
      message->size = sizeof(SnapshotBlocks);
      message->id = id;
      message->count %= droidheap::kBlocksPerMessage + 2;
      message->flags &= 3;
    }
    status = list.Add(*message, received);
    const bool ours = received == sizeof(SnapshotBlocks) && message->magic ==
                      droidheap::kSnapshotMagic && message->size == sizeof(SnapshotBlocks) &&
                      message->id == id && message->count <= droidheap::kBlocksPerMessage;
    const bool last = (message->flags & droidheap::kBlocksLast) != 0;
    if (status == BlockList::Status::kDone && (!ours || !last)) abort();
    if ((status == BlockList::Status::kFailed) != !list.why_not().empty()) abort();
  }
  if (list.blocks().size() > max_blocks) abort();
  for (const droidheap::HeapBlock& block : list.blocks()) {
    if (block.address + block.size < block.address) abort();
  }
  return 0;
}

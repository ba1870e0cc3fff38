// The ring buffers of one client (ring_buffer.h), in one sealed memfd, one after the other:
//   [ ring 0: metadata page | data ][ ring 1: metadata page | data ] ...
// each mapped as a SharedRingBuffer of its own, its data twice over. From protocol 13 the client's
// threads write to rings of their own (Client::RingOf), so that the lines a record writes -- the
// write position, the record's own -- are not taken from one core by another at every sample;
// an older client is given one ring, laid out as the one buffer it knows.
//
// Created by the daemon at the handshake and owned by the ClientConnection; attached by the
// client and never destroyed there (the Client's). Each ring's threads as ring_buffer.h says.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "protocol/ring_buffer.h"

namespace droidheap {

class RingSet {
 public:
  static constexpr uint32_t kMaxRings = 8;

  // Daemon side: `count` rings (1 to kMaxRings) of `data_size` bytes of data each (a power of
  // two, at least a page), laid out as `version`. nullptr on error.
  static RingSet* Create(uint32_t count, size_t data_size, uint32_t version = kRingBufferVersion);
  // Client side: maps the `count` rings of `total_size` bytes in all that the daemon sent; checks
  // the size, the seals and each ring's metadata. nullptr on error, the caller keeping the fd.
  static RingSet* Attach(int fd, uint64_t total_size, uint32_t count);
  // Unmaps every ring and closes the fd. Only when no writer can still be using them.
  static void Destroy(RingSet* set);
  struct Deleter {
    void operator()(RingSet* set) const { Destroy(set); }
  };
  RingSet(const RingSet&) = delete;
  RingSet& operator=(const RingSet&) = delete;

  int fd() const { return fd_; }
  uint32_t count() const { return count_; }
  SharedRingBuffer* ring(uint32_t index) const { return rings_[index]; }
  // The memfd's size: every ring's metadata page and data.
  uint64_t total_size() const { return count_ * rings_[0]->total_size(); }
  // The rings' mappings, one after the other.
  const void* mapping() const { return rings_[0]->mapping(); }
  size_t mapping_size() const { return count_ * rings_[0]->mapping_size(); }
  // Bytes written and not yet read, over all rings (each at most its data size: the positions
  // are the client's to write).
  uint64_t bytes_pending() const;

 private:
  explicit RingSet(int fd) : fd_(fd) {}
  static RingSet* Map(int fd, uint32_t count, size_t page_size, size_t data_size);

  int fd_;
  uint32_t count_ = 0;
  SharedRingBuffer* rings_[kMaxRings] = {};
};

}  // namespace droidheap

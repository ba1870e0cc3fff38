// Call paths the daemon has unwound before, published back to the client so that a sample whose
// stack repeats one travels as a reference to it (MatchedAllocRecord) instead of a stack copy
// (protocol 10, the reply's third fd).
//
// Most samples of most programs repeat a few call paths. The daemon already keeps what each unwind
// used (daemon/unwound_stack_cache.h: pc, sp, the stack top, the registers it read and the stack
// words its return addresses and frame addresses came from): a sample with the same values there
// unwinds to the same frames. When the daemon's cache finds such a repeat it publishes the entry
// here; the client, before copying a sample's stack (kilobytes: sqlite3 copies 10 KiB a sample),
// compares the live registers and those few stack words with the slots of the set that (sp, stack
// top) hash to, and on a match writes a record of 48 bytes naming the entry. The daemon books it
// to the entry's call stack without reading a stack or unwinding. Exact for the same reason the
// daemon's cache is; on any difference the client copies the stack as before.
//
// A set has two slots (ways): the call paths of one frame -- a loop's allocation and the one it
// makes every thousandth time, at the same sp -- share a set, and with one slot each took the other
// out at every turn, each time costing the daemon's lag in copied stacks (15% of malloc_churn's
// samples at -i 1). The daemon replaces the slot the client matched or it published least
// recently (Used).
//
// Written by the daemon alone (one unwinding worker per client), read by every thread of the
// client from the hook path. Each slot is a seqlock: `sequence` odd while the daemon rewrites it
// (or after it took the slot back, when the maps it was unwound with changed), and a reader that
// saw it change, or odd, does not match. Every field is an atomic word read relaxed: a torn read
// of a slot is possible and harmless, because the reader checks each stack word's address against
// its own stack bounds before reading it and trusts nothing it read unless the sequence held.
//
// The client maps the table read-only; the daemon never reads it back (it keeps its own copy of
// what each id stands for), so a client that rewrites it can only spoil its own matches. Shared
// between a 32-bit client and a 64-bit daemon: 64-bit words throughout, one layout.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace droidheap {

struct alignas(64) StackMatchSlot {
  static constexpr size_t kMaxRegisters = 10;
  static constexpr size_t kMaxWords = 118;
  std::atomic<uint64_t> sequence;  // even and not 0: a published entry (see the top of the file)
  std::atomic<uint64_t> id;        // what a MatchedAllocRecord names
  std::atomic<uint64_t> stack_top;  // as the daemon unwinds with it: UnwindStackTop
  std::atomic<uint64_t> counts;     // registers (low byte), stack words (next 16 bits)
  // The registers to compare: by their place in the client's capture (RegisterLayout::captured),
  // one byte each, and their values.
  std::atomic<uint64_t> register_slots[2];
  std::atomic<uint64_t> register_values[kMaxRegisters];
  // The stack words to compare: their offsets from sp (the sp register the slot names) and their
  // values (zero-extended words of the process).
  std::atomic<uint64_t> word_offsets[kMaxWords];
  std::atomic<uint64_t> word_values[kMaxWords];
};
static_assert(sizeof(StackMatchSlot) == 2048, "shared layout");

class StackMatches {
 public:
  static constexpr size_t kSets = 128;
  static constexpr size_t kWays = 2;
  static constexpr size_t kSlots = kSets * kWays;
  static constexpr size_t kSize = kSlots * sizeof(StackMatchSlot);
  static constexpr uint64_t kNoMatch = UINT64_MAX;

  // Daemon side: a new sealed memfd of kSize, every slot empty.
  static StackMatches* Create();
  // Client side: maps `fd` read-only; checks its size and seals. nullptr on error (fd stays the
  // caller's).
  static StackMatches* Attach(int fd, uint64_t size);
  static void Destroy(StackMatches* matches);
  struct Deleter {
    void operator()(StackMatches* matches) const { Destroy(matches); }
  };
  StackMatches(const StackMatches&) = delete;
  StackMatches& operator=(const StackMatches&) = delete;

  int fd() const { return fd_; }
  const void* mapping() const { return slots_; }
  // The first of the kWays slots of the set (sp, stack_top) hash to.
  static size_t SetOf(uint64_t sp, uint64_t stack_top) {
    const uint64_t mixed = (sp * 0x9e3779b97f4a7c15ull) ^ (stack_top * 0xc2b2ae3d27d4eb4full);
    return static_cast<size_t>(mixed >> 57) % kSets * kWays;
  }

  // Client side, any thread, inline in the sampled path: the id of the entry that registers
  // `captured` (this build's capture, RegisterLayout::captured) and the stack words in
  // [sp, sp + stack_size) repeat, unwound with `stack_top` (UnwindStackTop); kNoMatch when none.
  // `stack_size` is the thread's whole stack above sp, not the part a record would copy: on a
  // stack deeper than that, the daemon's unwind read on in the process, and those words count.
  uint64_t Match(const uint64_t* captured, size_t captured_count, uint64_t sp, uint64_t stack_size,
                 uint64_t stack_top) const {
    const size_t first = SetOf(sp, stack_top);
    for (size_t way = 0; way < kWays; ++way) {
      const uint64_t id =
          MatchSlot(slots_[first + way], captured, captured_count, sp, stack_size, stack_top);
      if (id != kNoMatch) return id;
    }
    return kNoMatch;
  }

  // Daemon side, its one worker thread: publishes entry `id` in a slot of the set of (sp,
  // stack_top), in place of the one used least recently, and returns that slot's index (for Used).
  // `register_slots` and `register_values` have `register_count` entries, `word_addresses` and
  // `word_values` `word_count` (within the limits of StackMatchSlot).
  size_t Publish(uint64_t id, uint64_t sp, uint64_t stack_top, size_t register_count,
                 const uint8_t* register_slots, const uint64_t* register_values,
                 size_t word_count, const uint64_t* word_addresses, const uint64_t* word_values);
  // Daemon side: the client matched entry `id`, published in slot `slot`; the slot's set then
  // keeps it before the other.
  void Used(size_t slot, uint64_t id) {
    if (slot < kSlots && published_[slot] == id + 1) last_used_[slot] = ++clock_;
  }
  // Daemon side: takes every published entry back (the maps they were unwound with changed).
  void Withdraw();
  // Daemon side: whether entry `id` is in a slot of the set of (sp, stack_top) now.
  bool Holds(uint64_t sp, uint64_t stack_top, uint64_t id) const {
    if (id == kNoMatch) return false;
    const size_t first = SetOf(sp, stack_top);
    for (size_t way = 0; way < kWays; ++way) {
      if (published_[first + way] == id + 1) return true;
    }
    return false;
  }

 private:
  StackMatches(int fd, StackMatchSlot* slots) : fd_(fd), slots_(slots) {}
  static StackMatches* Map(int fd, int protection);
  static uint64_t MatchSlot(const StackMatchSlot& slot, const uint64_t* captured,
                            size_t captured_count, uint64_t sp, uint64_t stack_size,
                            uint64_t stack_top) {
    const uint64_t sequence = slot.sequence.load(std::memory_order_acquire);
    if (sequence == 0 || (sequence & 1) != 0 ||
        slot.stack_top.load(std::memory_order_relaxed) != stack_top) {
      return kNoMatch;
    }
    const uint64_t counts = slot.counts.load(std::memory_order_relaxed);
    const size_t registers = counts & 0xff;
    const size_t words = (counts >> 8) & 0xffff;
    if (registers > StackMatchSlot::kMaxRegisters || words > StackMatchSlot::kMaxWords) {
      return kNoMatch;
    }
    uint64_t places = slot.register_slots[0].load(std::memory_order_relaxed);
    for (size_t i = 0; i < registers; ++i, places >>= 8) {
      if (i == 8) places = slot.register_slots[1].load(std::memory_order_relaxed);
      const size_t at = static_cast<size_t>(places & 0xff);
      if (at >= captured_count ||
          captured[at] != slot.register_values[i].load(std::memory_order_relaxed)) {
        return kNoMatch;
      }
    }
    // Each word within what the client would have copied, whatever a torn read of the slot says.
    if (words != 0 && stack_size < sizeof(void*)) return kNoMatch;
    const uint64_t last_offset = stack_size - sizeof(void*);
    const char* stack = reinterpret_cast<const char*>(static_cast<uintptr_t>(sp));
#pragma GCC unroll 2
    for (size_t i = 0; i < words; ++i) {
      const uint64_t offset = slot.word_offsets[i].load(std::memory_order_relaxed);
      if (offset > last_offset) return kNoMatch;
      uintptr_t word;
      __builtin_memcpy(&word, stack + static_cast<uintptr_t>(offset), sizeof(word));
      if (word != slot.word_values[i].load(std::memory_order_relaxed)) return kNoMatch;
    }
    const uint64_t id = slot.id.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return slot.sequence.load(std::memory_order_relaxed) == sequence ? id : kNoMatch;
  }
  // Makes the slot's sequence odd (being written) and returns the value to end the write with.
  uint64_t BeginWrite(size_t index);

  int fd_;
  StackMatchSlot* slots_;
  // The daemon's own count of each slot's sequence, never read back from the shared table.
  uint64_t sequences_[kSlots] = {};
  uint64_t published_[kSlots] = {};  // the id each slot holds, plus one; 0: none
  uint64_t last_used_[kSlots] = {};  // clock_ when the slot was last published or matched
  uint64_t clock_ = 0;
};

}  // namespace droidheap

// The addresses of this process's live sampled allocations, so that the free of any other block --
// nearly every free -- costs one look at one word and never reaches the shared buffer.
//
// Created by Client::Connect in memory of its own (anonymous pages: zero is the empty table) and
// never destroyed, like the Client; used by every thread from the malloc hooks. Lock-free (but
// for the one move to the large table, which the other inserting threads wait for), no
// allocation, no syscall (but their sched_yield then).
//
// Layout (AddressTable): 2^13 buckets of one cache line each, 8 address slots (0 = empty); and
// apart from them, 2^16 homes (8 per bucket: a home's addresses live in its bucket, home >> 3),
// a 16-bit word each about the addresses whose home it is: how many are in the table (4 bits),
// how many of those had to be placed in one of the kMaxSpill buckets after it (4 bits), the
// fingerprint of the one address when there is one (7 bits of its hash below the home's; 0: any,
// once a second address came), and whether the answer may lie further (the top bit, see below).
// The words are a dense 128 KiB array, so that the look every free takes stays in cache, where
// one line per bucket spread the frees over half a megabyte (a cache miss per free in programs
// that free a lot). Only a free whose home counts an address with its fingerprint (or any) scans
// the home bucket, and the ones after it only when some spilled. Eight homes per bucket and the
// fingerprint keep the look a filter when tens of thousands of sampled blocks are live: perl's
// 800k-key hash, ~20k live samples, has a quarter of the homes counted; a free it let through
// scanned a cold bucket (a cache miss), most often for a block never sampled, ~40 ns a free of its
// exit's 1.6M. With the fingerprint 1 in 25 goes on (the homes with two addresses or more).
//
//   Insert(a)  counts[home] += 1 (with a's fingerprint, or any), then CAS an empty slot 0 -> a
//              in the home bucket
//              else: counts[home] += spilled 1, then CAS an empty slot in the next kMaxSpill
//                    buckets
//              else (or the home counted kMaxCount): both undone, and the set moves to its
//                    large table (below)
//   Remove(a)  counts[home] == 0, or a fingerprint not a's: not there
//              home bucket holding a: slot -> 0, counts[home] -= 1
//              else, if any spilled: the next kMaxSpill buckets, slot -> 0, counts[home] -= 1 + 1
//
// An address is in the set at most once: the hooks insert it after the allocator handed it out,
// before the program has it (its record written, not yet published: Client::RecordAlloc), and
// remove it before handing it back (Client::BeginFree). The accesses are relaxed (but for the
// move below): a block is freed after its allocation by the program's own ordering (a thread
// hands a pointer to another only through some synchronisation), which makes the insert visible
// to the remove.
//
// When no bucket within reach has room for an address, the set moves to its large table, eight
// times larger (its pages, reserved by the client, are touched only as they fill): every address
// of the first table gets its home there marked (the top bit: look in the first table too), every
// home of the first table gets the top bit (the inline look then always says "maybe"), and new
// addresses go to the large table alone. A free then looks at its home there, whose counts stay a
// filter: the first table's would say "maybe" for most frees once it is full (its buckets and
// their spills scanned: ~300 instructions and 2.4 cache misses a free with 80k live samples).
// When the large table has no room either, the set overflows: from then on Remove says "report
// it" for every address, as if everything had been sampled -- the daemon ignores frees of blocks
// it never saw -- so a full set costs speed, never a missed free. Every home's top bit is set
// before the Insert that overflowed returns (before the program has the block): the look every
// free takes then says "maybe" with no second load.
//
// libc's table also keeps, beside each address, the ring its allocation was recorded in
// (KeepRings; Client::RingOf): in the 3 low bits of its slot, which every malloc'd block's
// alignment leaves zero. Its free goes to that ring, behind the allocation. An overflowed table
// still says where the blocks it holds went; a block it could not take went to ring 0. At -i 1,
// where every free is reported from the start, the table holds only the blocks of the other rings
// (a program's first sampling thread writes to ring 0 and pays for no table at all).
#pragma once

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace droidheap {

// One table of the set: 2^kBucketBits buckets of 8 slots, 8 homes per bucket with their counts.
// Owned by SampledAddresses, which says what a slot holds and what a home's top bit means.
template <unsigned kBucketBits>
class AddressTable {
 public:
  static constexpr size_t kBuckets = size_t{1} << kBucketBits;
  static constexpr size_t kSlotsPerBucket = 8;
  static constexpr size_t kMaxSpill = 15;
  static constexpr size_t kHomes = kBuckets << 3;
  // A home's word: its count (at most kMaxCount addresses: a home's 16th Insert fails, as when
  // its buckets are full, and with up to 4 addresses per home at worst it never happens by
  // chance), how many of those spilled, the one address's fingerprint, and kLookFurther.
  static constexpr uint16_t kOne = 1;
  static constexpr uint16_t kMaxCount = 15;
  static constexpr uint16_t kOneSpilled = uint16_t{1} << 4;
  static constexpr unsigned kFingerprintShift = 8;
  static constexpr uint16_t kFingerprints = uint16_t{0x7f} << kFingerprintShift;
  static constexpr uint16_t kLookFurther = uint16_t{1} << 15;

  // Whether `address` may be in this table: its home counts an address of its fingerprint (or
  // any), or looks further. One load of the dense array, and one test when the word is 0 (most).
  bool MayHold(uint64_t address) const {
    const uint16_t word = counts_[Home(address)].load(std::memory_order_relaxed);
    return word != 0 && ((word & kLookFurther) != 0 || Candidate(word, address));
  }
  // The home of `address`: its bucket is the home >> 3.
  static size_t Home(uint64_t address) {
    return static_cast<size_t>(Hash(address) >> (61 - kBucketBits));
  }
  // Whether the home of `address` has its top bit.
  bool LooksFurther(uint64_t address) const {
    return (counts_[Home(address)].load(std::memory_order_relaxed) & kLookFurther) != 0;
  }
  void LookFurther(uint64_t address) {
    counts_[Home(address)].fetch_or(kLookFurther, std::memory_order_relaxed);
  }
  void LookFurtherEverywhere() {
    for (std::atomic<uint16_t>& counts : counts_) {
      counts.fetch_or(kLookFurther, std::memory_order_relaxed);
    }
  }
  void Prefetch(uint64_t address) {
    const size_t home = Home(address);
    __builtin_prefetch(&counts_[home], 1);
    __builtin_prefetch(&buckets_[BucketOf(home)], 1);
  }
  // Calls `f` with every address in the table, its slot's `ring_bits` aside (a walk racing with
  // inserts and removes: it may miss what they change meanwhile; its loads are sequentially
  // consistent, as Claim's stores).
  template <typename F>
  void ForEachAddress(uint64_t ring_bits, F f) const {
    for (const Bucket& bucket : buckets_) {
      for (const std::atomic<uint64_t>& slot : bucket.slots) {
        const uint64_t value = slot.load(std::memory_order_seq_cst);
        if (value != 0) f(value & ~ring_bits);
      }
    }
  }

  // Puts `slot` (`address`, a ring in its low bits) in; false, nothing changed, when no bucket
  // within reach has room.
  bool Insert(uint64_t address, uint64_t slot) {
    const size_t home = Home(address);
    const size_t bucket = BucketOf(home);
    // Counted first, so that a Remove of this address never misses it: the first address of a
    // home leaves its fingerprint, a second makes it any (0) until the home is empty again.
    uint16_t word = counts_[home].load(std::memory_order_relaxed);
    uint16_t counted;
    do {
      if ((word & kMaxCount) == kMaxCount) return false;
      counted = static_cast<uint16_t>(
          ((word & kMaxCount) == 0 ? (word & ~kFingerprints) | Fingerprint(address)
                                   : word & ~kFingerprints) + kOne);
    } while (!counts_[home].compare_exchange_weak(word, counted, std::memory_order_relaxed));
    if (Claim(&buckets_[bucket], slot)) return true;
    counts_[home].fetch_add(kOneSpilled, std::memory_order_relaxed);
    for (size_t i = 1; i <= kMaxSpill; ++i) {
      if (Claim(&buckets_[(bucket + i) % kBuckets], slot)) return true;
    }
    Uncount(home, kOne + kOneSpilled);
    return false;
  }

  // Whether `address` is in the table, its slot's `ring_bits` aside.
  bool Holds(uint64_t address, uint64_t ring_bits) const {
    const size_t home = Home(address);
    const uint16_t counts = counts_[home].load(std::memory_order_relaxed);
    if (!Candidate(counts, address)) return false;
    const size_t bucket = BucketOf(home);
    if (Find(&buckets_[bucket], address, ring_bits) != nullptr) return true;
    if ((counts & kSpilled) != 0) {
      for (size_t i = 1; i <= kMaxSpill; ++i) {
        if (Find(&buckets_[(bucket + i) % kBuckets], address, ring_bits) != nullptr) return true;
      }
    }
    return false;
  }

  // Takes `address` out; false when it is not in the table. `ring`: its slot's ring_bits.
  bool Remove(uint64_t address, uint64_t ring_bits, uint32_t* ring) {
    const size_t home = Home(address);
    const uint16_t counts = counts_[home].load(std::memory_order_relaxed);
    if (!Candidate(counts, address)) return false;
    const size_t bucket = BucketOf(home);
    if (Release(&buckets_[bucket], address, ring_bits, ring)) {
      Uncount(home, kOne);
      return true;
    }
    if ((counts & kSpilled) != 0) {
      for (size_t i = 1; i <= kMaxSpill; ++i) {
        if (Release(&buckets_[(bucket + i) % kBuckets], address, ring_bits, ring)) {
          Uncount(home, kOne + kOneSpilled);
          return true;
        }
      }
    }
    return false;
  }

 private:
  struct alignas(64) Bucket {
    std::atomic<uint64_t> slots[kSlotsPerBucket];
  };
  static constexpr uint16_t kSpilled = kMaxCount * kOneSpilled;  // spilled <= count: no carry
  static_assert(kMaxCount < kOneSpilled && (kSpilled | kFingerprints | kLookFurther) == 0xfff0 &&
                    (kSpilled & kFingerprints) == 0,
                "a home's fields do not overlap");
  static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");
  static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                    std::atomic<uint16_t>::is_always_lock_free,
                "the hooks cannot take locks");

  // Blocks are at least 8-byte aligned: the hash takes the bits above that (Fibonacci hashing).
  // Its top bits are the home, the 7 below them the fingerprint (never 0, which means any).
  static uint64_t Hash(uint64_t address) { return (address >> 3) * 0x9e3779b97f4a7c15ull; }
  static uint16_t Fingerprint(uint64_t address) {
    const uint16_t bits = static_cast<uint16_t>(Hash(address) >> (54 - kBucketBits)) & 0x7f;
    return static_cast<uint16_t>((bits | (bits == 0)) << kFingerprintShift);
  }
  // Whether a home's `word` (its top bit aside) counts an address that may be `address`.
  static bool Candidate(uint16_t word, uint64_t address) {
    if ((word & kMaxCount) == 0) return false;
    const uint16_t fingerprint = word & kFingerprints;
    return fingerprint == 0 || fingerprint == Fingerprint(address);
  }
  static size_t BucketOf(size_t home) { return home >> 3; }
  // Takes `amount` (an address, spilled or not) off a home's word. With its last address goes
  // its fingerprint: the word is 0 again, which the free hook tests first.
  void Uncount(size_t home, uint16_t amount) {
    uint16_t word = counts_[home].load(std::memory_order_relaxed);
    uint16_t uncounted;
    do {
      uncounted = static_cast<uint16_t>(word - amount);
      if ((uncounted & kMaxCount) == 0) uncounted &= ~kFingerprints;
    } while (!counts_[home].compare_exchange_weak(word, uncounted, std::memory_order_relaxed));
  }
  static bool Claim(Bucket* bucket, uint64_t slot_value) {
    for (std::atomic<uint64_t>& slot : bucket->slots) {
      uint64_t empty = 0;
      if (slot.load(std::memory_order_relaxed) == 0 &&
          slot.compare_exchange_strong(empty, slot_value, std::memory_order_seq_cst)) {
        return true;
      }
    }
    return false;
  }
  // The slot of `bucket` that holds `address`, or nullptr.
  static const std::atomic<uint64_t>* Find(const Bucket* bucket, uint64_t address,
                                           uint64_t ring_bits) {
    for (const std::atomic<uint64_t>& slot : bucket->slots) {
      if ((slot.load(std::memory_order_relaxed) & ~ring_bits) == address) return &slot;
    }
    return nullptr;
  }
  static bool Release(Bucket* bucket, uint64_t address, uint64_t ring_bits, uint32_t* ring) {
    // The bucket is this table's, writable: Find only answers for a const one.
    auto* slot = const_cast<std::atomic<uint64_t>*>(Find(bucket, address, ring_bits));
    if (slot == nullptr) return false;
    *ring = static_cast<uint32_t>(slot->load(std::memory_order_relaxed) & ring_bits);
    slot->store(0, std::memory_order_relaxed);
    return true;
  }

  std::atomic<uint16_t> counts_[kHomes];  // by home bucket, see the top of the file
  Bucket buckets_[kBuckets];
};

class SampledAddresses {
 public:
  using FirstTable = AddressTable<13>;
  // Eight times the first: 512k slots, 5 MiB of pages touched as they are used.
  using LargeTable = AddressTable<16>;
  static constexpr uint32_t kMaxRings = 8;

  // Zero pages the set moves to when its first table has no room for an address, owned by the
  // caller (without: the set then overflows at once).
  void SetLargeTableRoom(LargeTable* room) { large_ = room; }

  // Every free is reported from now on: at the start for -i 1, where every block is sampled
  // anyway, or when the set overflows. Writes every home's count once.
  void ReportEveryFree() {
    every_free_.store(true, std::memory_order_relaxed);
    first_.LookFurtherEverywhere();
  }
  bool reports_every_free() const { return every_free_.load(std::memory_order_relaxed); }
  // Whether the set takes no more addresses: it had no room for one. Its blocks' rings are then
  // no longer known: a new sample goes to ring 0 (Client::RingOf).
  bool full() const { return full_.load(std::memory_order_relaxed); }
  // Keeps each block's ring (below kMaxRings) with it, before any Insert: every address is then
  // a multiple of 8. With ReportEveryFree as well (-i 1), the set holds only the blocks of rings
  // other than 0: where a block's free goes, for every block is reported, by default to ring 0.
  void KeepRings() { ring_bits_ = kMaxRings - 1; }

  // Remembers a sampled block, recorded in `ring` (0 unless KeepRings). False when the set does
  // not hold it: full, or a block of ring 0 when every free is reported anyway (its free will be
  // reported all the same, in ring 0).
  bool Insert(uint64_t address, uint32_t ring = 0) {
    if (full() || (ring == 0 && reports_every_free())) return false;
    const uint64_t slot = address | (ring & ring_bits_);
    if (!moving_.load(std::memory_order_relaxed) && first_.Insert(address, slot)) {
      // A move that began meanwhile may have walked past the slot: then it is marked here. The
      // slot's store, this load, the move's start and its walk's loads are all sequentially
      // consistent: of this thread and the mover, one sees what the other did.
      if (moving_.load(std::memory_order_seq_cst)) large_->LookFurther(address);
      return true;
    }
    return InsertInLarge(address, slot);
  }

  // Brings in the lines an Insert of `address` writes (a sampled allocation's, about to be
  // recorded: the wait for them overlaps the work before it).
  void Prefetch(uint64_t address) {
    if (moved()) {
      large_->Prefetch(address);
    } else {
      first_.Prefetch(address);
    }
  }

  // Inline in every free: false when the block at `address` cannot be in the set, from one load
  // of its home's word (no address of that home with its fingerprint is in the set, nor has the
  // set moved on).
  bool MayHold(uint64_t address) const { return first_.MayHold(address); }

  // Whether the block at `address` may be in the set: Remove's scan, changing nothing. A free its
  // home's word let through is of a block never sampled about half the time (perl's 20k live
  // samples: a home with two addresses or more, one free in 25), and it then goes no further.
  bool Holds(uint64_t address) const {
    if (reports_every_free()) return true;
    if (!moved()) return first_.Holds(address, ring_bits_);
    return HoldsAfterMove(address);
  }

  // Forgets a block about to be freed. True when its free must be reported: it was sampled, or
  // the set has overflowed; `ring` is then the ring its allocation was recorded in (0 when it is
  // not in the set).
  bool Remove(uint64_t address, uint32_t* ring) {
    *ring = 0;
    // Without rings such a table is never read again: what it still holds does not matter.
    const bool every_free = reports_every_free();
    if (every_free && ring_bits_ == 0) return true;
    if (!moved()) return first_.Remove(address, ring_bits_, ring) || every_free;
    return RemoveAfterMove(address, ring) || every_free;
  }

 private:
  bool moved() const { return moved_.load(std::memory_order_acquire); }

  // Out of line, what only a set that moved to its large table does: the sample path of every
  // other program stays as short as it was.
  __attribute__((noinline)) bool InsertInLarge(uint64_t address, uint64_t slot) {
    if (MoveToLarge() && large_->Insert(address, slot)) return true;
    full_.store(true, std::memory_order_relaxed);
    ReportEveryFree();
    return false;
  }
  // A home of the large table without the top bit has no address in the first.
  __attribute__((noinline)) bool HoldsAfterMove(uint64_t address) const {
    if (large_->Holds(address, ring_bits_)) return true;
    return large_->LooksFurther(address) && first_.Holds(address, ring_bits_);
  }
  __attribute__((noinline)) bool RemoveAfterMove(uint64_t address, uint32_t* ring) {
    if (large_->Remove(address, ring_bits_, ring)) return true;
    return large_->LooksFurther(address) && first_.Remove(address, ring_bits_, ring);
  }

  // Makes the large table the one new addresses go to, once (the first thread whose address found
  // no room; the others wait for it, a walk of the first table): every address of the first table
  // gets its home there marked, so that a free looks for it back here, and every home of the first
  // table looks further, so that every free leaves the inline look. False without a large table.
  bool MoveToLarge() {
    if (large_ == nullptr) return false;
    bool expected = false;
    if (moving_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
      first_.ForEachAddress(ring_bits_, [this](uint64_t address) { large_->LookFurther(address); });
      first_.LookFurtherEverywhere();
      moved_.store(true, std::memory_order_release);
    }
    while (!moved()) sched_yield();
    return true;
  }

  FirstTable first_;
  LargeTable* large_;
  std::atomic<bool> moving_;
  std::atomic<bool> moved_;
  std::atomic<bool> every_free_;
  std::atomic<bool> full_;
  uint64_t ring_bits_;  // the slots' bits that hold a ring (KeepRings), not the address
};

static_assert(sizeof(SampledAddresses) <= 660 * 1024, "the client's table stays well under 1 MiB");

}  // namespace droidheap

// Messages exchanged between the client library (in the profiled process) and droidheapd.
//
// Socket (SOCK_STREAM unix socket, path passed to the client through its options string):
//   client -> daemon  ClientHello + SCM_RIGHTS{/proc/self/maps fd, /proc/self/mem fd}
//   daemon -> client  DaemonReply + SCM_RIGHTS{ring buffer fd, totals fd, stack matches fd,
//                     snapshot channel fd} (no fd when rejected; the totals fd from version 4,
//                     heap_totals.h, when totals_size is not 0; the stack matches' from version
//                     12, stack_matches.h, when stack_matches_size is not 0; the snapshot
//                     channel's from version 11 when flags hold kFlagSnapshots)
//   client -> daemon  single wake-up bytes afterwards (content ignored); EOF = client gone.
//
// Shared memory: see ring_buffer.h. Every record in it starts with a RecordHeader; the record
// bodies below follow. All structs are fixed-size, little-endian as the machine, and only ever
// grow at the end: a reader accepts any `size` >= the size of the version it knows and ignores the
// rest, so an older client keeps working with a newer daemon.
//
// 32- and 64-bit processes talk to each other (a 32-bit app to a 64-bit daemon on a phone), so
// every struct has one layout on every ABI: only fixed-width fields, each 8-byte field at an
// offset that is a multiple of 8, no padding, and alignas(8) so that i386 (which aligns uint64_t
// to 4 inside structs) agrees too. The offsetof checks below hold in every build, and
// wire_layout_test prints the layouts so that the tests compare a 32-bit build's with a 64-bit
// one's. Pointers and sizes from the client travel as uint64_t; a 32-bit client's registers sit
// zero-extended after its AllocRecord, numbered for the ABI its ClientHello names.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "unwinder/registers.h"

namespace droidheap {

constexpr uint32_t kHelloMagic = 0x50414548;  // "HEAP"
constexpr uint32_t kReplyMagic = 0x4e4d4144;  // "DAMN" (daemon)
// 2: ClientHello::abi. 3: DaemonReply::block_timeout_us (milliseconds before, as
// block_timeout_ms; the daemon answers an older client in its unit). 4: DaemonReply::totals_size
// and the totals fd; AllocatorStatsRecord. 5: custom heaps (DaemonReply::heap_flags and
// heap_names, the kRecordHeap* records, the totals' slots per heap). 6: kRecordRecording.
// 7: an AllocRecord carries the registers the client captures, packed (AllocRecordRegisterBytes);
// kRecordExiting; kRecordCancelled; sequence numbers are places in the buffer (not contiguous).
// 8: ClientHello::flags (kHelloForked). 9: the shared buffer's version 3 (ring_buffer.h).
// 10: DaemonReply::stack_matches_size and its fd; kRecordAllocMatched, kRecordHeapAllocMatched.
// 11: kFlagSnapshots and the snapshot channel's fd (snapshot_channel.h).
// 12: the stack matches in sets of two slots (stack_matches.h); an older client gets none.
// 13: DaemonReply::ring_count: the buffer fd holds that many rings (ring_set.h), a thread writes
// to its own and a sampled block's free to its allocation's; sequence numbers order the records
// of one ring (a block's allocation and free are in the same ring).
// 14: a stack match's words are named by their offsets from sp (stack_matches.h); an older client
// gets no stack matches. 15: at -i 1 too the client is given rings (and keeps the blocks of its
// rings other than 0 in its table of sampled addresses, so that their frees follow them).
// 16: kRecordExiting may carry an ExitingRecord.
constexpr uint32_t kProtocolVersion = 16;
// Oldest client protocol version this daemon still accepts.
constexpr uint32_t kMinProtocolVersion = 1;

struct alignas(8) ClientHello {
  uint32_t magic;
  uint32_t version;
  uint32_t size;  // sizeof(ClientHello) as the client knows it
  int32_t pid;
  uint64_t flags;  // HelloFlags (version 8; 0 before)
  // Version 2. The ABI the process runs (registers.h's Abi): the register layout of its
  // AllocRecords and the word size of its stacks. A version 1 hello stops before it; its process
  // runs the daemon's own ABI.
  uint32_t abi;
  uint32_t reserved;
};
constexpr uint32_t kClientHelloV1Size = 24;
static_assert(sizeof(ClientHello) == 32, "wire layout");
static_assert(offsetof(ClientHello, flags) == 16 && offsetof(ClientHello, abi) == 24,
              "wire layout");

enum HelloFlags : uint64_t {
  // The process is a fork of a profiled one, connecting as a process of its own
  // (kFlagDisableForkTeardown): its heap holds its parent's blocks, whose frees come with its own,
  // so its frees are not a count of what its session allocated (as for a process attached late).
  kHelloForked = 1u << 0,
};

enum ReplyStatus : uint32_t {
  kReplyAccepted = 0,
  kReplyNotATarget = 1,
  kReplyBadHello = 2,
  kReplyDaemonBusy = 3,
  kReplyUnsupportedAbi = 4,  // the hello names an ABI this daemon cannot unwind
  kReplyNotPermitted = 5,    // the peer's uid is not served (handshake.h)
};

enum ClientFlags : uint32_t {
  // Buffer full: wait (up to block_timeout_us) for the daemon instead of tearing down at once.
  kFlagBlockClient = 1u << 0,
  // A forked child connects as a process of its own instead of only ending its copy of the
  // parent's session (version 4).
  kFlagDisableForkTeardown = 1u << 1,
  // The session looks for unreachable memory: the reply's last fd is the process's end of the
  // snapshot channel (version 11, snapshot_channel.h).
  kFlagSnapshots = 1u << 2,
};

// Custom heaps (include/droidheap/heaps.h). libc's heap is heap 0, named kMallocHeapName; a
// custom heap keeps the number the client gave it, from 1, for the life of the process.
constexpr char kMallocHeapName[] = "libc.malloc";
constexpr uint32_t kMaxCustomHeaps = 64;
constexpr size_t kHeapNameSize = 64;  // with its NUL; as DROIDHEAP_HEAP_NAME_SIZE
constexpr size_t kHeapNamesSize = 256;

enum HeapFlags : uint32_t {
  kHeapsSkipMalloc = 1u << 0,  // libc's heap is not recorded (a --heaps list without it)
  kHeapsAllCustom = 1u << 1,   // every custom heap is recorded (--all-heaps)
};

struct alignas(8) DaemonReply {
  uint32_t magic;
  uint32_t version;
  uint32_t size;
  uint32_t status;  // ReplyStatus
  uint64_t sampling_interval;  // mean bytes between samples; 1 = every allocation
  uint32_t max_stack_bytes;    // upper bound of the raw stack copy per record
  uint32_t block_timeout_us;  // heapprofd's block_client_timeout_us
  uint32_t flags;  // ClientFlags
  uint32_t reserved;
  uint64_t shmem_size;  // total size of the shared memory object
  uint64_t random_seed;  // sampler seed; 0 = seed from the clock (tests pin it)
  // Version 4. Size of the shared totals (heap_totals.h), the reply's second fd; 0 = none.
  uint64_t totals_size;
  // Version 5. Which heaps the session records (HeapFlags), and the custom heaps it records by
  // name unless kHeapsAllCustom: NUL-terminated names one after the other, an empty one last.
  uint32_t heap_flags;
  uint32_t reserved2;
  char heap_names[kHeapNamesSize];
  // Version 10. Size of the stack matches (stack_matches.h), the reply's last fd; 0 = none.
  uint64_t stack_matches_size;
  // Version 13. How many rings the buffer fd holds (ring_set.h), of shmem_size bytes in all; 0
  // (an older daemon) is one.
  uint32_t ring_count;
  uint32_t reserved3;
};
// A reply of version 3 stops before totals_size, one of version 4 before heap_flags: the client
// reads what came and zeroes the rest (which then records libc's heap alone).
constexpr uint32_t kDaemonReplyV3Size = 56;
static_assert(sizeof(DaemonReply) == 88 + kHeapNamesSize, "wire layout");
static_assert(offsetof(DaemonReply, sampling_interval) == 16 &&
                  offsetof(DaemonReply, max_stack_bytes) == 24 &&
                  offsetof(DaemonReply, shmem_size) == 40 &&
                  offsetof(DaemonReply, random_seed) == 48 &&
                  offsetof(DaemonReply, totals_size) == 56 &&
                  offsetof(DaemonReply, heap_flags) == 64 &&
                  offsetof(DaemonReply, heap_names) == 72 &&
                  offsetof(DaemonReply, stack_matches_size) == 72 + kHeapNamesSize &&
                  offsetof(DaemonReply, ring_count) == 80 + kHeapNamesSize,
              "wire layout");

enum RecordType : uint32_t {
  kRecordAlloc = 1,
  kRecordFree = 2,
  kRecordAllocatorStats = 3,  // version 4
  // Version 5, custom heaps: a HeapTag, then the AllocRecord (and its stack) or the FreeRecord.
  kRecordHeapAlloc = 4,
  kRecordHeapFree = 5,
  kRecordHeapName = 6,  // HeapNameRecord, before the heap's first record
  // Version 6, no body: the client's hooks and heaps record from here on. Between the reply and
  // this record the process runs unrecorded, so the daemon says "recording" only when it reads it
  // (for an older client, at the handshake).
  kRecordRecording = 7,
  // Version 7, no body: the process is exiting (exit() or the end of main), and waits until the
  // daemon has read this, so the daemon can still see it: its memory at exit is read then. An
  // older daemon skips it; a connection that closes without it was lost (a crash, _exit, a kill).
  // Version 16: an ExitingRecord as its body (none before: flags 0).
  kRecordExiting = 8,
  // Version 7, skipped: a free reserved for a realloc that then failed (Client::BeginFree).
  kRecordCancelled = 9,
  // Version 10: a sample whose stack repeats an entry of the stack matches (MatchedAllocRecord);
  // a custom heap's behind a HeapTag.
  kRecordAllocMatched = 10,
  kRecordHeapAllocMatched = 11,
};

struct alignas(8) HeapTag {
  uint32_t heap;  // from 1, < kMaxCustomHeaps + 1
  uint32_t reserved;
};
static_assert(sizeof(HeapTag) == 8, "wire layout");

struct alignas(8) HeapNameRecord {
  uint32_t heap;
  uint32_t reserved;
  char name[kHeapNameSize];  // NUL-terminated
};
static_assert(sizeof(HeapNameRecord) == 72, "wire layout");

struct alignas(8) AllocRecord {
  // Orders a block's allocation and free: from version 7 the record's place in its ring, taken
  // after the real allocation returned; before, a counter's next value, taken then too.
  uint64_t sequence;
  uint64_t address;
  uint64_t sample_size;  // bytes this sample stands for (see sampler.h)
  uint64_t alloc_size;   // bytes the program asked for
  uint64_t stack_pointer;  // address of the first copied stack byte
  uint32_t tid;
  uint32_t stack_size;   // bytes of raw stack copy after the registers
  // The registers follow (AllocRecordRegisterBytes), then uint8_t stack[stack_size].
};
static_assert(sizeof(AllocRecord) == 48, "wire layout");
static_assert(offsetof(AllocRecord, stack_pointer) == 32 && offsetof(AllocRecord, tid) == 40,
              "wire layout");

// The registers after an AllocRecord. From version 7, those the ABI's client captures, packed in
// ascending DWARF number (RegisterLayout::captured: 64 bytes on x86_64, 112 on arm64-v8a); before,
// uint64_t[kMaxRegisters] indexed by number, the rest zero: on every ABI 264 bytes, most of them
// zero, that each sample wrote and the daemon read.
constexpr size_t kAllocRecordV6RegisterBytes = 8 * kMaxRegisters;
constexpr size_t AllocRecordRegisterBytes(uint32_t version, const RegisterLayout& layout) {
  return version >= 7 ? 8 * size_t{layout.captured_count()} : kAllocRecordV6RegisterBytes;
}

// A sample whose registers and stack words repeat those of the stack matches' entry `match`
// (stack_matches.h): booked to that entry's call stack, no stack copy.
struct alignas(8) MatchedAllocRecord {
  uint64_t sequence;  // as AllocRecord's
  uint64_t address;
  uint64_t sample_size;
  uint64_t alloc_size;
  uint64_t match;  // StackMatchSlot::id
  uint32_t tid;
  uint32_t reserved;
};
static_assert(sizeof(MatchedAllocRecord) == 48, "wire layout");
static_assert(offsetof(MatchedAllocRecord, match) == 32 && offsetof(MatchedAllocRecord, tid) == 40,
              "wire layout");

// The stack top the daemon unwinds a sample with: the copy's end when the copy reached the top of
// the thread's stack (shorter than the limit), else 0 (not known).
constexpr uint64_t UnwindStackTop(uint64_t stack_pointer, uint64_t stack_size,
                                  uint64_t max_stack_bytes) {
  return stack_size > 0 && stack_size < max_stack_bytes ? stack_pointer + stack_size : 0;
}

struct alignas(8) FreeRecord {
  uint64_t sequence;  // as AllocRecord's, taken before the real free
  uint64_t address;
};
static_assert(sizeof(FreeRecord) == 16, "wire layout");

// What the allocator itself says it holds (mallinfo), read in the process at most every 100 ms
// while it samples, and at exit. Already interpreted per libc (common/platform.h).
struct alignas(8) AllocatorStatsRecord {
  uint64_t in_use_bytes;  // in blocks handed out and not freed
  uint64_t free_bytes;    // held by the allocator, free
  uint64_t system_bytes;  // taken from the system (heap and mmapped)
};
static_assert(sizeof(AllocatorStatsRecord) == 24, "wire layout");

enum ExitingFlags : uint32_t {
  // The allocator's figures were not read at exit (the read would have taken more than its share
  // of the time): the last ones sent are older.
  kExitingAllocatorNotRead = 1,
};
struct alignas(8) ExitingRecord {
  uint32_t flags;  // ExitingFlags
  uint32_t reserved;
};
static_assert(sizeof(ExitingRecord) == 8, "wire layout");

}  // namespace droidheap

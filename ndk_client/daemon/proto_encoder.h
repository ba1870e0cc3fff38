// A minimal protobuf encoder for the trace writer (trace_writer.h), and the Perfetto field numbers
// it uses: the NDK has no libprotobuf, and Perfetto's packets need only varints, length-delimited
// fields and nested messages. Plain values with no shared state; whoever holds one owns it (in the
// daemon, the main thread).
//
// A nested message is encoded into its own ProtoEncoder and copied into its parent with Message():
// the length prefix must be known before the body, and copying a body of at most a few hundred KiB
// costs nothing next to the write and fsync that follow. Repeated scalars are written unpacked (one
// tag per element), as proto2 declares them in Perfetto's protos: Perfetto's own decoders read
// repeated fields that way only.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>

namespace droidheap {

class ProtoEncoder {
 public:
  enum WireType : uint32_t { kVarint = 0, kLengthDelimited = 2 };

  // Every unsigned integer, bool and enum type; also int64.
  void Varint(uint32_t field, uint64_t value) {
    Tag(field, kVarint);
    RawVarint(value);
  }
  // Negative int32 values are sign-extended to ten bytes, as the protobuf encoding requires.
  void Int32(uint32_t field, int32_t value) {
    Varint(field, static_cast<uint64_t>(static_cast<int64_t>(value)));
  }
  void Bool(uint32_t field, bool value) { Varint(field, value ? 1 : 0); }
  // `string` and `bytes` fields alike: the bytes are written as they are.
  void Bytes(uint32_t field, const void* data, size_t size) {
    Tag(field, kLengthDelimited);
    RawVarint(size);
    buf_.append(static_cast<const char*>(data), size);
  }
  void Bytes(uint32_t field, const std::string& bytes) { Bytes(field, bytes.data(), bytes.size()); }
  void Message(uint32_t field, const ProtoEncoder& nested) { Bytes(field, nested.buf_); }
  // Concatenating two encodings of the same message type merges them, so pieces of a message
  // (repeated fields especially) can be staged apart and joined later.
  void Append(const ProtoEncoder& fields) { buf_ += fields.buf_; }

  const std::string& data() const { return buf_; }
  size_t size() const { return buf_.size(); }
  bool empty() const { return buf_.empty(); }
  void Clear() { buf_.clear(); }

 private:
  void Tag(uint32_t field, WireType type) { RawVarint((static_cast<uint64_t>(field) << 3) | type); }
  void RawVarint(uint64_t value) {
    while (value >= 0x80) {
      buf_.push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    buf_.push_back(static_cast<char>(value));
  }

  std::string buf_;
};

// Field numbers of the Perfetto messages the daemon writes (trace_writer.cc), one struct per
// message; the tests decode its output with perfetto_trace_pb2.
namespace pb {
struct Trace { enum : uint32_t { kPacket = 1 }; };
struct TracePacket {
  enum : uint32_t {
    kProcessTree = 2, kClockSnapshot = 6, kTimestamp = 8, kProcessStats = 9,
    kTrustedPacketSequenceId = 10, kTrackEvent = 11,
    kInternedData = 12, kSequenceFlags = 13, kProfilePacket = 37, kTrackDescriptor = 60,
    kFirstPacketOnSequence = 87
  };
  enum : uint64_t { kIncrementalStateCleared = 1, kNeedsIncrementalState = 2 };  // SequenceFlags
};
struct ClockSnapshot {
  enum : uint32_t { kClocks = 1, kPrimaryTraceClock = 2 };
  enum : uint32_t { kClockId = 1, kTimestamp = 2 };                 // Clock
  enum : uint64_t {  // BuiltinClock
    kRealtime = 1, kRealtimeCoarse = 2, kMonotonic = 3, kMonotonicCoarse = 4, kMonotonicRaw = 5,
    kBoottime = 6
  };
};
struct ProcessTree {
  enum : uint32_t { kProcesses = 1 };
  enum : uint32_t { kPid = 1, kCmdline = 3 };  // Process
};
struct ProcessMemoryStats {  // perfetto.protos.ProcessStats, the process_stats data source's
  enum : uint32_t { kProcesses = 1 };
  enum : uint32_t {  // Process
    kPid = 1, kVmRssKb = 3, kRssAnonKb = 4, kRssFileKb = 5, kRssShmemKb = 6, kVmSwapKb = 7,
    kVmHwmKb = 9
  };
};
struct TrackDescriptor {
  enum : uint32_t { kUuid = 1, kName = 2, kProcess = 3, kParentUuid = 5, kCounter = 8 };
};
struct ProcessDescriptor { enum : uint32_t { kPid = 1 }; };
struct CounterDescriptor {
  enum : uint32_t { kUnit = 3 };
  enum : uint64_t { kUnitTimeNs = 1, kUnitCount = 2, kUnitSizeBytes = 3 };  // Unit
};
struct TrackEvent {
  enum : uint32_t { kType = 9, kTrackUuid = 11, kName = 23, kCounterValue = 30 };
  enum : uint64_t { kTypeInstant = 3, kTypeCounter = 4 };  // Type
};
struct InternedData {
  enum : uint32_t {
    kFunctionNames = 5, kFrames = 6, kCallstacks = 7, kBuildIds = 16, kMappingPaths = 17,
    kMappings = 19
  };
};
struct InternedString { enum : uint32_t { kIid = 1, kStr = 2 }; };
struct Mapping {
  enum : uint32_t {
    kIid = 1, kBuildId = 2, kStartOffset = 3, kStart = 4, kEnd = 5, kLoadBias = 6,
    kPathStringIds = 7, kExactOffset = 8
  };
};
struct Frame { enum : uint32_t { kIid = 1, kMappingId = 3, kRelPc = 4 }; };
struct Callstack { enum : uint32_t { kIid = 1, kFrameIds = 2 }; };
struct ProfilePacket { enum : uint32_t { kProcessDumps = 5, kContinued = 6, kIndex = 7 }; };
struct ProcessHeapSamples {
  enum : uint32_t {
    kPid = 1, kSamples = 2, kFromStartup = 3, kStats = 5, kDisconnected = 6, kBufferOverran = 7,
    kBufferCorrupted = 8, kTimestamp = 9, kHitGuardrail = 10, kHeapName = 11,
    kSamplingIntervalBytes = 12, kStartTimestamp = 15
  };
};
struct HeapSample {
  enum : uint32_t {
    kCallstackId = 1, kSelfAllocated = 2, kSelfFreed = 3, kAllocCount = 5, kFreeCount = 6,
    kSelfMax = 8, kSelfMaxCount = 9
  };
};
struct ProcessStats {
  enum : uint32_t {
    kUnwindingErrors = 1, kHeapSamples = 2, kMapReparses = 3, kTotalUnwindingTimeUs = 5,
    kClientSpinlockBlockedUs = 6
  };
};
}  // namespace pb

}  // namespace droidheap

// A dump's figures that are not call stacks -- the exact totals of the heap and what the allocator
// says it holds -- as Perfetto counter tracks under the process: the trace processor shows each
// as a counter of the process, the UI as a track that moves from dump to dump, and the host reads
// them back by name (droidheap/trace/).
//
// Names: "<heap>: allocations", "<heap>: allocated bytes", "<heap>: frees", "<heap>: freed bytes"
// (every call, counted at usable sizes) and "mallinfo: in use bytes", "mallinfo: free bytes",
// "mallinfo: system bytes"; with --unreachable the latest sweep's own figures, of the sampled
// blocks as they are: "unreachable: blocks swept", "unreachable: blocks", "unreachable: bytes"
// (what their callers asked for), "unreachable: threads held" (ns), "unreachable: blocks listed"
// (by the allocator, followed through; 0 when it did not list them). Track uuids are derived from
// the pid, so every dump can describe its tracks again (the same descriptor twice is one track)
// and a restarted sequence needs nothing remembered.
//
// A process's last dump also says, as an instant event on the process's track, how its profile
// ended: "process exited" (through its exit path, kRecordExiting), "process exec'd" (it runs
// another program now), "profile ended" (a guardrail: the dump's flags say which) or "connection
// lost" (a crash, _exit, a kill, a closed socket). An
// instant event "unreachable memory: NOTE" says what the sweep did not scan, or why none ran
// ("not swept: ..."); "mallinfo: not read at exit", that the mallinfo figures of a process that
// exited are older than its exit (the read would have taken too long).
#pragma once

#include <vector>

#include "daemon/dump_snapshot.h"
#include "daemon/proto_encoder.h"

namespace droidheap {

struct CounterPackets {
  std::vector<ProtoEncoder> descriptors;  // TracePacket.track_descriptor bodies
  std::vector<ProtoEncoder> events;  // TracePacket.track_event bodies: one per value, the ending
};

// The tracks and values of `process`'s dump, and how it ended; nothing for figures it does not
// have.
CounterPackets DumpCounters(const DumpSnapshot& process);

}  // namespace droidheap

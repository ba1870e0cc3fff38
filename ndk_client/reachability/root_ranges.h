// What a sweep (heap_sweep.h) takes as the roots of a process copied in a ProcessSnapshot: what a
// conservative collector takes. Every thread's registers and its stack from its stack pointer up;
// every other readable and writable mapping (modules' data and bss, TLS, anonymous memory, the
// Java heap on Android), except the profiler's own memory (its tables hold every sampled block's
// address) and device memory. Of private mappings only the pages that hold anything are read
// (populated_pages.h); shared ones, whose pages the copy does not map, are read whole up to a
// bound.
//
// With `blocks_complete` (every block the allocator holds is among `blocks`: -i 1 from the
// process's start, or the allocator's own list), no page a block lies in is a root either: what
// else such a page holds is the allocator's, free space with stale copies of pointers among it.
// The allocator's other pages stay roots (a block allocated before the profiler came, which it
// never saw, may lie there): in doubt, reachable. Without it the blocks not given are unknown, and
// every byte that is not a given block stays a root.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "reachability/heap_sweep.h"
#include "reachability/process_snapshot.h"

namespace droidheap {

// *not_scanned says what memory could not be taken (empty when all was): a root missed may make a
// block look unreachable that is not, which the caller says beside the verdict.
SweepRoots RootsOf(const ProcessSnapshot& snapshot, const std::vector<HeapBlock>& blocks,
                   bool blocks_complete, std::string* not_scanned);

}  // namespace droidheap

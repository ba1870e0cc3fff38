// Call paths for the unwinding benchmark: recursion through functions of different frame shapes
// (plain, callee-saved registers, fixed arrays, variable-length arrays) and through libc's qsort
// comparison callback. corpus.cc is compiled -O2 -fomit-frame-pointer, so unwinding it needs CFI.
#pragma once

#include <stdint.h>

namespace droidheap_bench {

using CaptureFn = void (*)(void* arg);

// Descends `depth` corpus frames along the path `seed` chooses, calls capture(arg) at the bottom
// and returns a value that depends on the whole path (so that no call is a tail call).
uint64_t RunCorpusPath(uint64_t seed, int depth, CaptureFn capture, void* arg);

}  // namespace droidheap_bench

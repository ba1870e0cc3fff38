// Captures the callee-saved registers, stack pointer and return address of its caller into
// `regs[kNativeCaptured]`, packed in ascending DWARF register number (RegisterLayout::captured;
// ExpandCapturedRegisters spreads them out), as they are right after the call returns: pc is the
// return address into the caller and sp the caller's stack pointer. Enough to start unwinding the
// caller with frame pointers or CFI. Does not touch the heap.
#pragma once

#include <stdint.h>

extern "C" void DroidheapCaptureRegisters(uint64_t* regs) __attribute__((visibility("hidden")));

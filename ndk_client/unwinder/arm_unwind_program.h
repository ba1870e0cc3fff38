// Executes the ARM EHABI unwind instructions of one function (ARM IHI 0038 section 10.3): the byte
// code that .ARM.exidx/.ARM.extab entries carry (arm_exidx.h), which pops the registers a function
// saved and moves the virtual stack pointer (vsp) past its frame, giving the caller's registers.
// Stateless; any thread. The bytes come from a file the profiled app controls and the words popped
// from its stack: every instruction consumes at least one byte, so execution ends after at most
// `bytes.count` instructions, and spare or reserved encodings fail rather than guess.
#pragma once

#include <stdint.h>

#include "unwinder/arm_exidx.h"
#include "unwinder/stack_memory.h"

namespace droidheap {

enum class ArmUnwindOutcome : uint8_t {
  kDone,           // regs hold the caller's: r13 the final vsp, r15 the return address
  kRefused,        // "refuse to unwind" (10000000 00000000): the function cannot be unwound
  kMalformed,      // a spare or reserved instruction, or one cut off by the end of the bytes
  kMemoryInvalid,  // a register to pop could not be read
};

// Runs `bytes` on `regs` (armeabi-v7a's registers, r0-r15 at 0-15, 32-bit values zero-extended;
// r13 the callee's sp). On kDone the popped registers, r13 (= vsp) and r15 are written: r15 is the
// popped pc when the instructions pop one, lr (r14) otherwise. The Thumb bit is left as popped.
// On any other outcome `regs` is unchanged.
ArmUnwindOutcome ExecuteArmUnwind(const ArmUnwindBytes& bytes, const StackMemory& memory,
                                  uint64_t* regs);

}  // namespace droidheap

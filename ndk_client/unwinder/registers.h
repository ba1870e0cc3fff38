// The register file the client captures and the unwinder works on, indexed by DWARF register
// number so that call-frame information applies to it directly. Shared by the wire protocol
// (AllocRecord::regs) and the unwinder.
#pragma once

namespace droidheap {

// x86_64: 0..15 general registers (rax rdx rcx rbx rsi rdi rbp rsp r8..r15), 16 = rip (the
//         return-address column of CFI).
// aarch64: 0..30 = x0..x30 (x30 = lr, the return-address column), 31 = sp, 32 = pc (not a DWARF
//         register; the unwinder's own slot for the frame's pc).
constexpr int kMaxRegisters = 33;
#if defined(__x86_64__)
constexpr int kRegSp = 7;
constexpr int kRegFp = 6;
constexpr int kRegPc = 16;
#elif defined(__aarch64__)
constexpr int kRegSp = 31;
constexpr int kRegFp = 29;
constexpr int kRegPc = 32;
#else
#error "droidheap supports x86_64 and aarch64"
#endif

}  // namespace droidheap

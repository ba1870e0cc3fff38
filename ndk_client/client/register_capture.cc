#include "client/register_capture.h"

// Written in assembly so that the compiler cannot spill or reuse any of the captured registers.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl DroidheapCaptureRegisters
  .hidden DroidheapCaptureRegisters
  .type DroidheapCaptureRegisters, @function
DroidheapCaptureRegisters:
  .cfi_startproc
  movq %rbx, 3*8(%rdi)
  movq %rbp, 6*8(%rdi)
  leaq 8(%rsp), %rax
  movq %rax, 7*8(%rdi)
  movq %r12, 12*8(%rdi)
  movq %r13, 13*8(%rdi)
  movq %r14, 14*8(%rdi)
  movq %r15, 15*8(%rdi)
  movq (%rsp), %rax
  movq %rax, 16*8(%rdi)
  ret
  .cfi_endproc
  .size DroidheapCaptureRegisters, .-DroidheapCaptureRegisters
)");
#elif defined(__aarch64__)
asm(R"(
  .text
  .globl DroidheapCaptureRegisters
  .hidden DroidheapCaptureRegisters
  .type DroidheapCaptureRegisters, %function
DroidheapCaptureRegisters:
  .cfi_startproc
  stp x19, x20, [x0, #19*8]
  stp x21, x22, [x0, #21*8]
  stp x23, x24, [x0, #23*8]
  stp x25, x26, [x0, #25*8]
  stp x27, x28, [x0, #27*8]
  stp x29, x30, [x0, #29*8]
  mov x1, sp
  str x1, [x0, #31*8]
  str x30, [x0, #32*8]
  ret
  .cfi_endproc
  .size DroidheapCaptureRegisters, .-DroidheapCaptureRegisters
)");
#else
#error "unsupported architecture"
#endif

#include "client/register_capture.h"

// Written in assembly so that the compiler cannot spill or reuse any of the captured registers.
// Each architecture's body sits between the directives all of them share; TYPE is how its
// assembler spells a function symbol.
#define DROIDHEAP_CAPTURE_SYMBOL(TYPE)     \
  ".text\n"                                \
  ".globl DroidheapCaptureRegisters\n"     \
  ".hidden DroidheapCaptureRegisters\n"    \
  ".type DroidheapCaptureRegisters, " TYPE "\n"
#define DROIDHEAP_CAPTURE_SIZE ".size DroidheapCaptureRegisters, .-DroidheapCaptureRegisters\n"

#if defined(__x86_64__)
asm(DROIDHEAP_CAPTURE_SYMBOL("@function") R"(
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
)" DROIDHEAP_CAPTURE_SIZE);
#elif defined(__aarch64__)
asm(DROIDHEAP_CAPTURE_SYMBOL("%function") R"(
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
)" DROIDHEAP_CAPTURE_SIZE);
#elif defined(__i386__)
// cdecl: the argument is on the stack above the return address. Each 32-bit register goes into
// the low half of its 64-bit slot, the high half is zeroed.
asm(DROIDHEAP_CAPTURE_SYMBOL("@function") R"(
DroidheapCaptureRegisters:
  .cfi_startproc
  movl 4(%esp), %eax
  movl %ebx, 3*8(%eax)
  movl $0, 3*8+4(%eax)
  leal 4(%esp), %ecx
  movl %ecx, 4*8(%eax)
  movl $0, 4*8+4(%eax)
  movl %ebp, 5*8(%eax)
  movl $0, 5*8+4(%eax)
  movl %esi, 6*8(%eax)
  movl $0, 6*8+4(%eax)
  movl %edi, 7*8(%eax)
  movl $0, 7*8+4(%eax)
  movl (%esp), %ecx
  movl %ecx, 8*8(%eax)
  movl $0, 8*8+4(%eax)
  ret
  .cfi_endproc
)" DROIDHEAP_CAPTURE_SIZE);
#elif defined(__arm__)
// AAPCS: r4..r11 are callee-saved, sp is unchanged by the call, lr holds the return address (bit 0
// set when the caller is Thumb code; the unwinder clears it). Assembled as ARM code whatever the
// caller's mode: the linker turns the caller's bl into blx. Not built or run here (no NDK): see
// docs/devices.md, "ABIs".
asm(DROIDHEAP_CAPTURE_SYMBOL("%function") R"(
  .syntax unified
  .arm
  .p2align 2
  .macro droidheap_save reg, slot
  str \reg, [r0, #\slot*8]
  str r1, [r0, #\slot*8+4]
  .endm
DroidheapCaptureRegisters:
  .cfi_startproc
  mov r1, #0
  droidheap_save r4, 4
  droidheap_save r5, 5
  droidheap_save r6, 6
  droidheap_save r7, 7
  droidheap_save r8, 8
  droidheap_save r9, 9
  droidheap_save r10, 10
  droidheap_save r11, 11
  droidheap_save sp, 13
  droidheap_save lr, 14
  droidheap_save lr, 15
  bx lr
  .cfi_endproc
  .purgem droidheap_save
)" DROIDHEAP_CAPTURE_SIZE);
#else
#error "unsupported architecture"
#endif

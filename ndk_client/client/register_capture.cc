#include "client/register_capture.h"

// Each body stores the registers of its ABI's RegisterLayout::captured in ascending DWARF number,
// slot after slot (unwinder/registers.h). Written in assembly so that the compiler cannot spill or
// reuse any of the captured registers. Each architecture's body sits between the directives all
// of them share; TYPE is how its assembler spells a function symbol.
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
  movq %rbx, 0*8(%rdi)
  movq %rbp, 1*8(%rdi)
  leaq 8(%rsp), %rax
  movq %rax, 2*8(%rdi)
  movq %r12, 3*8(%rdi)
  movq %r13, 4*8(%rdi)
  movq %r14, 5*8(%rdi)
  movq %r15, 6*8(%rdi)
  movq (%rsp), %rax
  movq %rax, 7*8(%rdi)
  ret
  .cfi_endproc
)" DROIDHEAP_CAPTURE_SIZE);
#elif defined(__aarch64__)
asm(DROIDHEAP_CAPTURE_SYMBOL("%function") R"(
DroidheapCaptureRegisters:
  .cfi_startproc
  stp x19, x20, [x0, #0*8]
  stp x21, x22, [x0, #2*8]
  stp x23, x24, [x0, #4*8]
  stp x25, x26, [x0, #6*8]
  stp x27, x28, [x0, #8*8]
  stp x29, x30, [x0, #10*8]
  mov x1, sp
  str x1, [x0, #12*8]
  str x30, [x0, #13*8]
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
  movl %ebx, 0*8(%eax)
  movl $0, 0*8+4(%eax)
  leal 4(%esp), %ecx
  movl %ecx, 1*8(%eax)
  movl $0, 1*8+4(%eax)
  movl %ebp, 2*8(%eax)
  movl $0, 2*8+4(%eax)
  movl %esi, 3*8(%eax)
  movl $0, 3*8+4(%eax)
  movl %edi, 4*8(%eax)
  movl $0, 4*8+4(%eax)
  movl (%esp), %ecx
  movl %ecx, 5*8(%eax)
  movl $0, 5*8+4(%eax)
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
  droidheap_save r4, 0
  droidheap_save r5, 1
  droidheap_save r6, 2
  droidheap_save r7, 3
  droidheap_save r8, 4
  droidheap_save r9, 5
  droidheap_save r10, 6
  droidheap_save r11, 7
  droidheap_save sp, 8
  droidheap_save lr, 9
  droidheap_save lr, 10
  bx lr
  .cfi_endproc
  .purgem droidheap_save
)" DROIDHEAP_CAPTURE_SIZE);
#else
#error "unsupported architecture"
#endif

// The register file the client captures and the unwinder works on, indexed by DWARF register
// number so that call-frame information applies to it directly, and the ABIs it can describe.
// Shared by the wire protocol (AllocRecord::regs, ClientHello::abi), the client and the unwinder.
//
// The ABI is a run-time value on the daemon's side: a 64-bit droidheapd on a phone unwinds the
// 32-bit apps too, whose records carry 32-bit registers (zero-extended) and 4-byte stack slots.
//
//   ABI          DWARF registers in regs[]                                    sp  fp  pc  word
//   x86_64       0..15 rax rdx rcx rbx rsi rdi rbp rsp r8..r15, 16 rip        7   6  16   8
//   arm64-v8a    0..30 x0..x30 (x30 = lr), 31 sp, 32 pc (the unwinder's own)  31  29  32   8
//   x86          0..7 eax ecx edx ebx esp ebp esi edi, 8 eip                  4   5   8   4
//   armeabi-v7a  0..15 r0..r15 (r13 sp, r14 lr, r15 pc)                       13   7  15   4
//
// The client captures only what unwinding its caller needs: the callee-saved registers, sp and the
// return address (as pc; on armeabi-v7a as lr too), and sends them packed in ascending register
// number (AllocRecord): `captured` below. The daemon expands them into the register file, the
// others zero.
//
// The return address is CFI's return-address column (rip/x30/eip/lr); pc is where the unwinder
// keeps each frame's pc. armeabi-v7a's frame pointer is r7, as clang uses it in Thumb-2 code (the
// NDK's default): ARM-mode code chains r11, which the frame-pointer fallback does not follow.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace droidheap {

constexpr int kMaxRegisters = 33;

// Numbered for the wire (ClientHello::abi): never renumber, only add.
enum class Abi : uint32_t {
  kUnknown = 0,
  kX86_64 = 1,
  kArm64 = 2,
  kX86 = 3,
  kArm = 4,
};

struct RegisterLayout {
  Abi abi;
  const char* name;  // Android's name of the ABI
  int sp;
  int fp;
  int pc;
  uint32_t word_size;    // bytes in a pointer and a stack slot
  uint16_t elf_machine;  // e_machine of the ELF files the ABI runs (elf.h's EM_*)
  bool has_ehabi;        // code is described by ARM EHABI tables (.ARM.exidx), besides CFI
  uint64_t captured;     // bit n: the client captures register n (see above)

  constexpr uint32_t captured_count() const {
    return static_cast<uint32_t>(__builtin_popcountll(captured));
  }

  // Addresses wrap at the word size: a 32-bit CFA computation must too.
  uint64_t Wrap(uint64_t address) const {
    return word_size == 8 ? address : address & 0xffffffffu;
  }
};

inline constexpr RegisterLayout kLayouts[] = {
    // rbx rbp rsp r12..r15 rip
    {Abi::kX86_64, "x86_64", 7, 6, 16, 8, 62 /* EM_X86_64 */, false, 0x1f0c8},
    // x19..x30 sp pc
    {Abi::kArm64, "arm64-v8a", 31, 29, 32, 8, 183 /* EM_AARCH64 */, false, 0x1fff80000},
    // ebx esp ebp esi edi eip
    {Abi::kX86, "x86", 4, 5, 8, 4, 3 /* EM_386 */, false, 0x1f8},
    // r4..r11 sp lr pc
    {Abi::kArm, "armeabi-v7a", 13, 7, 15, 4, 40 /* EM_ARM */, true, 0xeff0},
};

// What any unwind starts from: sp, the frame pointer and pc are among the captured registers.
constexpr bool CapturesUnwindingRoots(const RegisterLayout& layout) {
  return ((layout.captured >> layout.sp) & (layout.captured >> layout.fp) &
          (layout.captured >> layout.pc) & 1) != 0;
}
static_assert(CapturesUnwindingRoots(kLayouts[0]) && CapturesUnwindingRoots(kLayouts[1]) &&
                  CapturesUnwindingRoots(kLayouts[2]) && CapturesUnwindingRoots(kLayouts[3]),
              "every ABI's capture holds sp, fp and pc");

// Where captured register `number` is among the words the client sends (ascending numbers).
constexpr uint32_t CapturedSlot(const RegisterLayout& layout, uint32_t number) {
  return static_cast<uint32_t>(
      __builtin_popcountll(layout.captured & ((uint64_t{1} << number) - 1)));
}

// Spreads `packed` (layout.captured_count() words, as the client sends them) over `regs`, indexed
// by register number; the registers not captured are zero.
inline void ExpandCapturedRegisters(const RegisterLayout& layout, const uint64_t* packed,
                                    uint64_t regs[kMaxRegisters]) {
  for (int n = 0; n < kMaxRegisters; ++n) regs[n] = 0;
  size_t next = 0;
  // Set bit by set bit (lowest first): once per sample in the daemon.
  for (uint64_t left = layout.captured; left != 0; left &= left - 1) {
    regs[__builtin_ctzll(left)] = packed[next++];
  }
}

// nullptr for kUnknown and for numbers this build does not know (a newer client's).
constexpr const RegisterLayout* LayoutOf(Abi abi) {
  for (const RegisterLayout& layout : kLayouts) {
    if (layout.abi == abi) return &layout;
  }
  return nullptr;
}

// This build's own ABI, which its client sends and its tests capture.
#if defined(__x86_64__)
constexpr Abi kNativeAbi = Abi::kX86_64;
#elif defined(__aarch64__)
constexpr Abi kNativeAbi = Abi::kArm64;
#elif defined(__i386__)
constexpr Abi kNativeAbi = Abi::kX86;
#elif defined(__arm__)
constexpr Abi kNativeAbi = Abi::kArm;
#else
#error "droidheap supports x86_64, arm64-v8a, x86 and armeabi-v7a"
#endif
inline constexpr const RegisterLayout& kNativeLayout = *LayoutOf(kNativeAbi);
static_assert(kNativeLayout.word_size == sizeof(void*), "the native layout's word is a pointer");
// The registers this build's client captures (DroidheapCaptureRegisters), and where sp is among
// them.
constexpr uint32_t kNativeCaptured = kNativeLayout.captured_count();
constexpr uint32_t kCapturedSpSlot = CapturedSlot(kNativeLayout, kNativeLayout.sp);
constexpr int kRegSp = kNativeLayout.sp;
constexpr int kRegFp = kNativeLayout.fp;
constexpr int kRegPc = kNativeLayout.pc;

}  // namespace droidheap

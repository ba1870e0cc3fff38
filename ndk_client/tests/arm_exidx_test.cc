// ARM EHABI tables (arm_exidx.h) and their unwind instructions (arm_unwind_program.h) on
// hand-built tables: every instruction class, EXIDX_CANTUNWIND, inline and .ARM.extab entries of
// the compact models 0, 1 and 2 and the generic model, hostile tables, and the unwinder taking
// frames through a file's table. With a path argument
// (an armeabi-v7a ELF file clang built, tests/unit/test_arm_exidx.py): every function symbol of
// the file has an entry whose instructions run.
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "unwinder/arm_exidx.h"
#include "unwinder/arm_unwind_program.h"
#include "unwinder/cfi_file.h"
#include "unwinder/dwarf_unwinder.h"

using namespace droidheap;

namespace {

constexpr uint32_t kStack = 0x10000;  // where the fake stack's first word lies

// A stack of words at kStack, read through StackMemory as the unwinder reads the client's copy.
struct FakeStack {
  std::vector<uint32_t> words;
  StackMemory memory() const {
    return StackMemory(kStack, reinterpret_cast<const uint8_t*>(words.data()),
                       words.size() * 4, -1);
  }
};

// Instruction bytes packed MSB first into words, as in an .ARM.extab entry of model 1 (the first
// word's personality byte and count come first).
struct Packed {
  std::vector<uint32_t> words;
  ArmUnwindBytes bytes;
};
Packed Pack(const std::vector<uint8_t>& ops) {
  Packed p;
  std::vector<uint8_t> all = {0x81, 0};  // personality 1, count patched below
  all.insert(all.end(), ops.begin(), ops.end());
  while (all.size() % 4 != 0) all.push_back(0xb0);
  all[1] = static_cast<uint8_t>(all.size() / 4 - 1);
  for (size_t i = 0; i < all.size(); i += 4) {
    p.words.push_back(uint32_t{all[i]} << 24 | uint32_t{all[i + 1]} << 16 |
                      uint32_t{all[i + 2]} << 8 | all[i + 3]);
  }
  p.bytes = {reinterpret_cast<const uint8_t*>(p.words.data()), 2,
             static_cast<uint32_t>(ops.size())};
  return p;
}

struct Regs {
  uint64_t r[kMaxRegisters] = {};
};
Regs Initial() {
  Regs regs;
  for (int i = 0; i < 16; ++i) regs.r[i] = 0x1000 + i;
  regs.r[13] = kStack;
  return regs;
}

ArmUnwindOutcome Run(const std::vector<uint8_t>& ops, const FakeStack& stack, Regs* regs) {
  Packed packed = Pack(ops);
  return ExecuteArmUnwind(packed.bytes, stack.memory(), regs->r);
}

void TestInstructions() {
  FakeStack stack;
  for (uint32_t i = 0; i < 64; ++i) stack.words.push_back(0xa000 + i);

  // 00xxxxxx and 01xxxxxx move vsp; without a popped pc the return address is lr.
  Regs regs = Initial();
  CHECK(Run({0x03, 0x41}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[13] == kStack + 16 - 8 && regs.r[15] == 0x100e);

  // 1000iiii iiiiiiii: {r4, r7, r14} from the stack, lowest register lowest.
  regs = Initial();
  CHECK(Run({0x84, 0x09}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[4] == 0xa000 && regs.r[7] == 0xa001 && regs.r[14] == 0xa002);
  CHECK(regs.r[15] == 0xa002 && regs.r[13] == kStack + 12 && regs.r[5] == 0x1005);

  // ... with r15: the popped pc wins over lr.
  regs = Initial();
  CHECK(Run({0x8c, 0x00}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[14] == 0xa000 && regs.r[15] == 0xa001);

  // ... with r13: vsp becomes the loaded value after the whole instruction.
  stack.words[1] = kStack + 0x40;
  regs = Initial();
  CHECK(Run({0x82, 0x01, 0x00}, stack, &regs) == ArmUnwindOutcome::kDone);  // {r4, r13}, vsp += 4
  CHECK(regs.r[4] == 0xa000 && regs.r[13] == kStack + 0x44);
  stack.words[1] = 0xa001;

  // 10000000 00000000: refuse to unwind, registers untouched.
  regs = Initial();
  CHECK(Run({0x80, 0x00}, stack, &regs) == ArmUnwindOutcome::kRefused);
  CHECK(regs.r[13] == kStack && regs.r[15] == 0x100f);

  // 1001nnnn: vsp = r[nnnn]; 13 and 15 are reserved.
  regs = Initial();
  regs.r[7] = kStack + 8;
  CHECK(Run({0x97, 0xa8}, stack, &regs) == ArmUnwindOutcome::kDone);  // vsp = r7; pop {r4, lr}
  CHECK(regs.r[4] == 0xa002 && regs.r[15] == 0xa003 && regs.r[13] == kStack + 16);
  regs = Initial();
  CHECK(Run({0x9d}, stack, &regs) == ArmUnwindOutcome::kMalformed);
  CHECK(Run({0x9f}, stack, &regs) == ArmUnwindOutcome::kMalformed);
  CHECK(regs.r[13] == kStack);

  // 10100nnn / 10101nnn: r4-r[4+nnn] (+ r14).
  regs = Initial();
  CHECK(Run({0xa2}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[4] == 0xa000 && regs.r[6] == 0xa002 && regs.r[7] == 0x1007);
  CHECK(regs.r[13] == kStack + 12 && regs.r[15] == 0x100e);
  regs = Initial();
  CHECK(Run({0xaf}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[11] == 0xa007 && regs.r[14] == 0xa008 && regs.r[15] == 0xa008);
  CHECK(regs.r[13] == kStack + 36);

  // 10110000: finish; what follows is not executed.
  regs = Initial();
  CHECK(Run({0xb0, 0xa2}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[13] == kStack && regs.r[4] == 0x1004);

  // 10110001 0000iiii: {r0-r3} under mask; 0 and xxxx != 0 are spare.
  regs = Initial();
  CHECK(Run({0xb1, 0x05}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[0] == 0xa000 && regs.r[1] == 0x1001 && regs.r[2] == 0xa001);
  CHECK(Run({0xb1, 0x00}, stack, &regs) == ArmUnwindOutcome::kMalformed);
  CHECK(Run({0xb1, 0x12}, stack, &regs) == ArmUnwindOutcome::kMalformed);

  // 10110010 uleb128: vsp += 0x204 + (uleb128 << 2); 0x81 0x01 is 129.
  regs = Initial();
  CHECK(Run({0xb2, 0x81, 0x01}, stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[13] == kStack + 0x204 + (129 << 2));
  CHECK(Run({0xb2, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, stack, &regs) ==
        ArmUnwindOutcome::kMalformed);  // longer than 32 bits
  CHECK(Run({0xb2, 0x81}, stack, &regs) == ArmUnwindOutcome::kMalformed);  // cut off

  // VFP: only vsp moves. FSTMFDX forms take one more word than VPUSH's.
  struct VfpCase {
    std::vector<uint8_t> ops;
    uint32_t advance;
  };
  const VfpCase vfp[] = {
      {{0xb3, 0x12}, 3 * 8 + 4},  // d1-d3, FSTMFDX
      {{0xb8}, 8 + 4},            // d8, FSTMFDX
      {{0xbf}, 8 * 8 + 4},        // d8-d15, FSTMFDX
      {{0xc8, 0x03}, 4 * 8},      // d16-d19, VPUSH
      {{0xc9, 0x84}, 5 * 8},      // d8-d12, VPUSH
      {{0xd0}, 8},                // d8, VPUSH
      {{0xd7}, 8 * 8},            // d8-d15, VPUSH
      {{0xc0}, 8},                // wR10 (iWMMX)
      {{0xc6, 0x01}, 16},         // wR0-wR1
      {{0xc7, 0x03}, 8},          // wCGR0, wCGR1
  };
  for (const VfpCase& c : vfp) {
    regs = Initial();
    CHECK(Run(c.ops, stack, &regs) == ArmUnwindOutcome::kDone);
    CHECK(regs.r[13] == kStack + c.advance && regs.r[15] == 0x100e);
  }
  CHECK(Run({0xb3, 0xf1}, stack, &regs) == ArmUnwindOutcome::kMalformed);  // d15-d16
  CHECK(Run({0xc8, 0xf1}, stack, &regs) == ArmUnwindOutcome::kMalformed);  // d31-d32

  // Spare encodings.
  for (uint8_t op : {0xb4, 0xb7, 0xca, 0xcf, 0xd8, 0xe0, 0xff}) {
    regs = Initial();
    CHECK(Run({op}, stack, &regs) == ArmUnwindOutcome::kMalformed);
    CHECK(regs.r[13] == kStack);
  }
  // A two-byte instruction cut off by the end of the bytes.
  CHECK(Run({0x84}, stack, &regs) == ArmUnwindOutcome::kMalformed);

  // A pop beyond the stack's end (no /proc/pid/mem to fall back on).
  regs = Initial();
  regs.r[13] = kStack + 63 * 4;
  CHECK(Run({0xa3}, stack, &regs) == ArmUnwindOutcome::kMemoryInvalid);
  CHECK(regs.r[13] == kStack + 63 * 4 && regs.r[4] == 0x1004);

  // A long sequence of vsp = r[n] ends with its bytes.
  regs = Initial();
  regs.r[5] = kStack;
  CHECK(Run(std::vector<uint8_t>(4000, 0x95), stack, &regs) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[13] == kStack);
}

// A fake file: one executable segment at vaddr 0x1000 (offset 0x1000) holding the functions and
// a read-only one at vaddr 0x8000 (offset 0x3000) holding .ARM.exidx then .ARM.extab.
struct FakeFile {
  static constexpr uint32_t kExidxOffset = 0x3000;
  static constexpr uint32_t kExidxVaddr = 0x8000;
  std::vector<uint8_t> data = std::vector<uint8_t>(0x4000, 0);
  std::vector<ArmExidxTable::Segment> loads = {{0x1000, 0x1000, 0x2000, true},
                                               {0x3000, 0x8000, 0x1000, false}};
  uint32_t entries = 0;

  void Put(uint32_t offset, uint32_t word) { memcpy(&data[offset], &word, 4); }
  static uint32_t Prel(uint32_t target, uint32_t from) { return (target - from) & 0x7fffffffu; }
  // Entry i for a function at `function`; `word` as is.
  void Entry(uint32_t function, uint32_t word) {
    uint32_t at = kExidxVaddr + entries * 8;
    Put(kExidxOffset + entries * 8, Prel(function, at));
    Put(kExidxOffset + entries * 8 + 4, word);
    ++entries;
  }
  // Entry i pointing at the .ARM.extab entry at vaddr `extab`.
  void ExtabEntry(uint32_t function, uint32_t extab) {
    Entry(function, Prel(extab, kExidxVaddr + entries * 8 + 4));
  }
  ArmExidxTable Table(uint32_t size_override = ~0u) const {
    return ArmExidxTable(data.data(), data.size(), kExidxOffset,
                         size_override != ~0u ? size_override : entries * 8, kExidxVaddr, loads);
  }
};

void TestTable() {
  FakeFile file;
  // extab entries at vaddr 0x8800 (model 1: two more words), 0x8900 (model 2, inline bytes
  // only), 0x8a00 (generic: personality at 0x1800, then GNU data), 0x8b00 (generic, personality
  // outside code), 0x8c00 (reserved index 3), 0x8d00 (model 1, count running past the segment).
  const uint32_t extab = FakeFile::kExidxOffset + 0x800;
  file.Put(extab, 0x8102a8b1);  // model 1, 2 more words: pop {r4, lr}; pop {r0} ...
  file.Put(extab + 4, 0x01b0b0b0);
  file.Put(extab + 8, 0xb0b0b0b0);
  file.Put(extab + 0x100, 0x8200a1b0);  // model 2: pop {r4, r5}; finish
  file.Put(extab + 0x200, FakeFile::Prel(0x1800, 0x8a00));
  file.Put(extab + 0x204, 0x00a8b0b0);  // no more words; pop {r4, lr}
  file.Put(extab + 0x300, FakeFile::Prel(0x8f00, 0x8b00));
  file.Put(extab + 0x304, 0x00a8b0b0);
  file.Put(extab + 0x400, 0x83000000);
  file.Put(extab + 0x500, 0x81ff0000);  // 255 more words: beyond the segment
  file.Entry(0x1001, 0x80b0b0b0);      // 0x1000 Thumb: inline, finish (a leaf)
  file.ExtabEntry(0x1100, 0x8800);     // model 1
  file.ExtabEntry(0x1201, 0x8900);     // model 2
  file.Entry(0x1300, 1);               // CANTUNWIND
  file.ExtabEntry(0x1400, 0x8a00);     // generic
  file.ExtabEntry(0x1500, 0x8b00);     // generic, not code
  file.ExtabEntry(0x1600, 0x8c00);     // reserved index
  file.ExtabEntry(0x1700, 0x8d00);     // count out of range
  file.Entry(0x1800, 0xc0b0b0b0);      // inline with a personality index other than 0
  file.ExtabEntry(0x1900, 0x7ff00000);  // extab outside every segment
  file.Entry(0x1a00, 1);               // the linker's closing CANTUNWIND
  ArmExidxTable table = file.Table();
  CHECK(table.entry_count() == 11 && table.FunctionStart(0) == 0x1000);

  CHECK(table.Find(0x0fff).status == ArmExidxStatus::kNotCovered);
  CHECK(table.Find(0x100000000ull).status == ArmExidxStatus::kNotCovered);
  ArmExidxEntry e = table.Find(0x1010);
  CHECK(e.status == ArmExidxStatus::kFound && e.bytes.count == 3 && e.bytes.At(0) == 0xb0);

  FakeStack stack;
  for (uint32_t i = 0; i < 16; ++i) stack.words.push_back(0xa000 + i);
  Regs regs = Initial();
  e = table.Find(0x11fe);
  CHECK(e.status == ArmExidxStatus::kFound && e.bytes.count == 10);
  CHECK(e.bytes.At(0) == 0xa8 && e.bytes.At(1) == 0xb1 && e.bytes.At(2) == 0x01);
  CHECK(ExecuteArmUnwind(e.bytes, stack.memory(), regs.r) == ArmUnwindOutcome::kDone);
  CHECK(regs.r[4] == 0xa000 && regs.r[15] == 0xa001 && regs.r[0] == 0xa002);
  CHECK(regs.r[13] == kStack + 12);

  e = table.Find(0x1200);
  CHECK(e.status == ArmExidxStatus::kFound && e.bytes.count == 2 && e.bytes.At(0) == 0xa1);
  CHECK(table.Find(0x1300).status == ArmExidxStatus::kCantUnwind);
  e = table.Find(0x1400);
  CHECK(e.status == ArmExidxStatus::kFound && e.bytes.count == 3 && e.bytes.At(0) == 0xa8);
  CHECK(table.Find(0x1500).status == ArmExidxStatus::kMalformed);
  CHECK(table.Find(0x1600).status == ArmExidxStatus::kMalformed);
  CHECK(table.Find(0x1700).status == ArmExidxStatus::kMalformed);
  CHECK(table.Find(0x1800).status == ArmExidxStatus::kMalformed);
  CHECK(table.Find(0x1900).status == ArmExidxStatus::kMalformed);
  CHECK(table.Find(0x2fff).status == ArmExidxStatus::kCantUnwind);

  // Truncated tables: a size that is no multiple of 8 drops the partial entry; a table that runs
  // past the file is none; one whose addresses wrap is none.
  CHECK(file.Table(8 * 3 + 5).entry_count() == 3);
  CHECK(ArmExidxTable(file.data.data(), file.data.size(), 0x3ff8, 16, 0x8ff8, file.loads)
            .entry_count() == 0);
  CHECK(ArmExidxTable(file.data.data(), file.data.size(), 0x3000, 16, 0xfffffff8, file.loads)
            .entry_count() == 0);
  CHECK(ArmExidxTable(file.data.data(), file.data.size(), 0x3000, 0, 0x8000, file.loads)
            .Find(0x1000).status == ArmExidxStatus::kNotCovered);

  // A hostile table in no order still answers, within its bounds.
  FakeFile shuffled;
  for (uint32_t f : {0x1900u, 0x1100u, 0x1a00u, 0x1000u, 0x1f00u}) shuffled.Entry(f, 0x80b0b0b0);
  ArmExidxTable hostile = shuffled.Table();
  for (uint32_t pc = 0; pc < 0x3000; pc += 0x10) hostile.Find(pc);
}

// A 32-bit ARM ELF file on disk, as the unwinder finds it through a process's maps: one
// executable PT_LOAD (file offset = vaddr) and PT_ARM_EXIDX at 0x200 with `words` (pairs).
std::string WriteArmElf(const std::vector<uint32_t>& words) {
  std::vector<uint8_t> file(0x2000, 0);
  Elf32_Ehdr ehdr{};
  memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
  ehdr.e_ident[EI_CLASS] = ELFCLASS32;
  ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr.e_ident[EI_VERSION] = EV_CURRENT;
  ehdr.e_type = ET_DYN;
  ehdr.e_machine = EM_ARM;
  ehdr.e_version = EV_CURRENT;
  ehdr.e_phoff = sizeof(ehdr);
  ehdr.e_ehsize = sizeof(ehdr);
  ehdr.e_phentsize = sizeof(Elf32_Phdr);
  ehdr.e_phnum = 2;
  memcpy(file.data(), &ehdr, sizeof(ehdr));
  Elf32_Phdr phdrs[2] = {};
  phdrs[0].p_type = PT_LOAD;
  phdrs[0].p_filesz = phdrs[0].p_memsz = 0x2000;
  phdrs[0].p_flags = PF_R | PF_X;
  phdrs[0].p_align = 0x1000;
  phdrs[1].p_type = 0x70000001;  // PT_ARM_EXIDX
  phdrs[1].p_offset = phdrs[1].p_vaddr = 0x200;
  phdrs[1].p_filesz = phdrs[1].p_memsz = static_cast<uint32_t>(words.size() * 4);
  phdrs[1].p_flags = PF_R;
  memcpy(file.data() + sizeof(ehdr), phdrs, sizeof(phdrs));
  for (size_t i = 0; i < words.size(); ++i) {
    // Even words: the function, made prel31 from where it is stored.
    uint32_t word = i % 2 == 0 ? FakeFile::Prel(words[i], 0x200 + static_cast<uint32_t>(i) * 4)
                               : words[i];
    memcpy(file.data() + 0x200 + i * 4, &word, 4);
  }
  char path[] = "/tmp/arm_exidx_test.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size()));
  close(fd);
  return path;
}

// The unwinder takes armeabi-v7a frames without CFI through their file's EHABI entries: popped
// return addresses lead from entry to entry (Thumb bits cleared), a CANTUNWIND function ends the
// stack unless a frame record leads on, an entry it cannot execute is an error, and a pc no entry
// covers goes to the frame-pointer fallback.
void TestUnwinderUsesEhabi() {
  const std::string path = WriteArmElf({
      0x1000, 0x80a8b0b0,  // f1: pop {r4, lr}
      0x1100, 0x8001a9b0,  // f2: vsp += 8; pop {r4, r5, lr}
      0x1200, 1,           // f3: CANTUNWIND
      0x1300, 0x80b5b0b0,  // f4: a spare instruction
      0x1400, 1,           // the closing CANTUNWIND
  });
  struct stat st;
  CHECK(stat(path.c_str(), &st) == 0);
  char maps_text[256];
  snprintf(maps_text, sizeof(maps_text), "100000-102000 r-xp 00000000 %x:%x %llu %s\n",
           major(st.st_dev), minor(st.st_dev), static_cast<unsigned long long>(st.st_ino),
           path.c_str());
  const RegisterLayout& arm = *LayoutOf(Abi::kArm);
  ElfCache cache;
  DwarfUnwinder unwinder(&cache);
  ProcessMaps maps;
  maps.Parse(maps_text);

  FakeStack stack{std::vector<uint32_t>(32, 0)};
  stack.words[0] = 0x44;        // f1's r4
  stack.words[1] = 0x101105;    // into f2, Thumb
  stack.words[4] = 0x55;        // f2's r4 (after 8 skipped bytes)
  stack.words[6] = 0x101205;    // into f3
  stack.words[8] = 0;           // a frame record at kStack + 32: caller's r7
  stack.words[9] = 0x101305;    // ... its return address, into f4
  Regs regs;
  regs.r[13] = kStack;
  regs.r[15] = 0x101011;  // in f1, Thumb
  UnwindResult result;
  unwinder.Unwind(arm, regs.r, 0, stack.memory(), &maps, -1, 64, &result);
  CHECK(result.error == UnwindError::kNone);
  CHECK((result.pcs == std::vector<uint64_t>{0x101010, 0x101104, 0x101204}));
  CHECK(unwinder.stats().ehabi_frames == 2 && unwinder.stats().ehabi_ends == 1);

  regs.r[7] = kStack + 32;  // f3 has a frame record: it leads on, to f4, which fails
  unwinder.Unwind(arm, regs.r, 0, stack.memory(), &maps, -1, 64, &result);
  CHECK(result.error == UnwindError::kInvalidEhabi);
  CHECK((result.pcs == std::vector<uint64_t>{0x101010, 0x101104, 0x101204, 0x101304}));
  CHECK(unwinder.stats().fp_frames == 1);

  regs.r[7] = 0;
  regs.r[15] = 0x100800;  // before the first entry, no frame record
  unwinder.Unwind(arm, regs.r, 0, stack.memory(), &maps, -1, 64, &result);
  CHECK(result.error == UnwindError::kNoUnwindInfo && result.pcs.size() == 1);
  unlink(path.c_str());
}

// Every function symbol of a clang-built armeabi-v7a file has an entry, whose instructions run on
// a stack of words 0x100; printed one per line ("NAME found at ENTRY_START: BYTES -> ok sp+N",
// "NAME cantunwind",
// "NAME missing").
int CheckElfFile(const char* path) {
  struct stat st;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0 && fstat(fd, &st) == 0);
  MappedFileId id{major(st.st_dev), minor(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  droidheap::ReadAllowance allowance(UINT64_MAX);
  std::unique_ptr<CfiFile> cfi =
      CfiFile::Open(path, id, {0, static_cast<uint64_t>(st.st_size), ""}, &allowance);
  CHECK(cfi != nullptr && cfi->exidx() != nullptr);
  const ArmExidxTable& table = *cfi->exidx();
  void* mapped = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK(mapped != MAP_FAILED);
  const uint8_t* data = static_cast<const uint8_t*>(mapped);
  Elf32_Ehdr ehdr;
  memcpy(&ehdr, data, sizeof(ehdr));
  std::vector<Elf32_Shdr> sections(ehdr.e_shnum);
  memcpy(sections.data(), data + ehdr.e_shoff, ehdr.e_shnum * sizeof(Elf32_Shdr));
  size_t functions = 0;
  for (const Elf32_Shdr& symtab : sections) {
    if (symtab.sh_type != SHT_SYMTAB) continue;
    const char* names = reinterpret_cast<const char*>(data + sections[symtab.sh_link].sh_offset);
    for (size_t i = 0; i < symtab.sh_size / sizeof(Elf32_Sym); ++i) {
      Elf32_Sym sym;
      memcpy(&sym, data + symtab.sh_offset + i * sizeof(sym), sizeof(sym));
      if (ELF32_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
          sym.st_size == 0) {
        continue;
      }
      const uint32_t start = sym.st_value & ~1u;
      ArmExidxEntry entry = table.Find(start + sym.st_size - 1);
      FakeStack stack{std::vector<uint32_t>(1 << 16, 0x100)};  // 256 KiB: frames of any size
      Regs regs = Initial();
      for (int r = 0; r < 13; ++r) regs.r[r] = kStack + 0x800;  // a frame pointer: mid-stack
      if (entry.status != ArmExidxStatus::kFound) {
        // The start files (crtbegin) are built without unwind tables: their functions say so, or
        // (_start, in assembly) precede the table.
        printf("%s %s\n", names + sym.st_name,
               entry.status == ArmExidxStatus::kCantUnwind  ? "cantunwind"
               : entry.status == ArmExidxStatus::kNotCovered ? "missing"
                                                             : "MALFORMED");
        if (entry.status == ArmExidxStatus::kMalformed) return 1;
        continue;
      }
      ArmUnwindOutcome outcome = ExecuteArmUnwind(entry.bytes, stack.memory(), regs.r);
      printf("%s found at 0x%x:", names + sym.st_name, table.FunctionStart(entry.index));
      for (uint32_t k = 0; k < entry.bytes.count; ++k) {
        printf(" %02x", entry.bytes.At(k));
      }
      printf(" -> %s sp+%u\n", outcome == ArmUnwindOutcome::kDone ? "ok" : "FAILED",
             static_cast<unsigned>(regs.r[13] - kStack));
      if (outcome != ArmUnwindOutcome::kDone) {
        fprintf(stderr, "%s: no unwindable entry\n", names + sym.st_name);
        return 1;
      }
      ++functions;
    }
  }
  printf("%zu functions unwindable\n", functions);
  munmap(mapped, st.st_size);
  close(fd);
  return functions > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2) return CheckElfFile(argv[1]);
  TestInstructions();
  TestTable();
  TestUnwinderUsesEhabi();
  printf("ok\n");
  return 0;
}

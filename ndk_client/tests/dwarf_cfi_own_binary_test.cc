// CfiTable over the test binary's own .eh_frame and .eh_frame_hdr, as the compiler and linker
// wrote them: rows of known functions match the ABI's prologue conventions, the hdr table's
// binary search agrees with a plain scan, and (x86_64, x86) the PLT's CFA expression evaluates.
// Built for each ABI the tests build: a 32-bit build reads a 32-bit ELF file.
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>

#include "tests/dwarf_test_util.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_cfi.h"

using droidheap::CfiRow;
using droidheap::CfiSectionView;
using droidheap::CfiTable;
using droidheap::RuleKind;

// This binary's ELF structures (link.h's ElfW: Elf32_* or Elf64_*).
using Ehdr = ElfW(Ehdr);
using Shdr = ElfW(Shdr);
using Sym = ElfW(Sym);
constexpr unsigned char kElfClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;

// Functions whose CFI is checked (extern "C": found by name in the symbol table).
extern "C" __attribute__((noinline)) int CfiSampleLeaf(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}

int (*volatile g_leaf)(int) = CfiSampleLeaf;  // keeps the call out of line

extern "C" __attribute__((noinline)) int CfiSampleFrame(int n) {
  volatile int values[32];
  for (int i = 0; i < 32; ++i) values[i] = g_leaf(n + i);
  int sum = 0;
  for (int i = 0; i < 32; ++i) sum += values[i];
  return sum;
}

namespace {


bool Cfa(const CfiRow& row, uint32_t reg, int64_t offset) {
  return !row.cfa.is_expression && row.cfa.reg == reg && row.cfa.offset == offset;
}

bool Rule(const CfiRow& row, int reg, RuleKind kind, int64_t value = 0) {
  return row.regs[reg].kind == kind && row.regs[reg].value == value;
}

// Registers for the PLT expression; no memory.
struct RegisterContext : droidheap::ExpressionContext {
  uint64_t regs[droidheap::kMaxRegisters] = {};
  uint32_t AddressSize() const override { return sizeof(void*); }
  bool ReadRegister(uint32_t reg, uint64_t* value) const override {
    if (reg >= droidheap::kMaxRegisters) return false;
    *value = regs[reg];
    return true;
  }
  bool ReadMemory(uint64_t, uint64_t*) const override { return false; }
};

struct SelfElf {
  std::vector<uint8_t> file;
  CfiSectionView eh_frame, eh_frame_hdr, debug_frame;
  uint64_t plt_vaddr = 0, plt_size = 0;
  std::vector<Sym> functions;
  std::vector<std::string> names;
};

// Section headers of /proc/self/exe (the test trusts its own binary, but still checks bounds).
bool LoadSelf(SelfElf* self) {
  FILE* f = fopen("/proc/self/exe", "rb");
  if (!f) return false;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    self->file.insert(self->file.end(), chunk, chunk + n);
  }
  fclose(f);
  const std::vector<uint8_t>& file = self->file;
  Ehdr ehdr;
  if (file.size() < sizeof(ehdr)) return false;
  memcpy(&ehdr, file.data(), sizeof(ehdr));
  if (memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 || ehdr.e_ident[EI_CLASS] != kElfClass ||
      ehdr.e_shentsize != sizeof(Shdr) ||
      ehdr.e_shoff + uint64_t{ehdr.e_shnum} * sizeof(Shdr) > file.size() ||
      ehdr.e_shstrndx >= ehdr.e_shnum) {
    return false;
  }
  std::vector<Shdr> sections(ehdr.e_shnum);
  memcpy(sections.data(), file.data() + ehdr.e_shoff, sections.size() * sizeof(Shdr));
  for (const Shdr& sh : sections) {
    if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > file.size()) return false;
  }
  auto chars = [&](uint64_t offset) { return reinterpret_cast<const char*>(file.data() + offset); };
  const char* names = chars(sections[ehdr.e_shstrndx].sh_offset);
  for (const Shdr& sh : sections) {
    std::string name = names + sh.sh_name;
    CfiSectionView view{file.data() + sh.sh_offset, static_cast<size_t>(sh.sh_size), sh.sh_addr,
                        sizeof(void*)};
    if (name == ".eh_frame") self->eh_frame = view;
    if (name == ".eh_frame_hdr") self->eh_frame_hdr = view;
    if (name == ".debug_frame") self->debug_frame = view;
    if (name == ".plt") {
      self->plt_vaddr = sh.sh_addr;
      self->plt_size = sh.sh_size;
    }
    if (sh.sh_type == SHT_SYMTAB && sh.sh_link < sections.size()) {
      const char* strings = chars(sections[sh.sh_link].sh_offset);
      for (uint64_t off = 0; off + sizeof(Sym) <= sh.sh_size; off += sizeof(Sym)) {
        Sym sym;
        memcpy(&sym, file.data() + sh.sh_offset + off, sizeof(sym));
        // The type is the low nibble of st_info in both classes.
        if ((sym.st_info & 0xf) == STT_FUNC && sym.st_size > 0 && sym.st_value != 0) {
          self->functions.push_back(sym);
          self->names.push_back(strings + sym.st_name);
        }
      }
    }
  }
  return true;
}

bool SameRow(const CfiRow& a, const CfiRow& b) {
  if (a.cfa.is_expression != b.cfa.is_expression || a.cfa.reg != b.cfa.reg ||
      a.cfa.offset != b.cfa.offset || a.cfa.expression != b.cfa.expression ||
      a.return_address_register != b.return_address_register || a.pc_begin != b.pc_begin ||
      a.pc_end != b.pc_end || a.signal_frame != b.signal_frame) {
    return false;
  }
  for (int i = 0; i < droidheap::kMaxRegisters; ++i) {
    if (a.regs[i].kind != b.regs[i].kind || a.regs[i].value != b.regs[i].value ||
        a.regs[i].expression != b.regs[i].expression) {
      return false;
    }
  }
  return true;
}

// Walks every row of two of our functions: the CFA is always sp or fp plus an offset, and the
// return address where the ABI puts it; the hdr lookup and a plain scan agree everywhere.
void TestOwnEhFrame() {
  using droidheap::kRegFp;
  using droidheap::kRegSp;
  [[maybe_unused]] constexpr int64_t kWord = sizeof(void*);
  SelfElf self;
  CHECK(LoadSelf(&self));
  CHECK(self.eh_frame.size > 0 && self.eh_frame_hdr.size > 0);
  CfiTable table(self.eh_frame, self.eh_frame_hdr, self.debug_frame);
  CfiTable scanned(self.eh_frame, kNone, kNone);
  uint64_t bias = LoadBiasOf(reinterpret_cast<uintptr_t>(&CfiSampleLeaf));
  // A leaf may get no frame record even with -fno-omit-frame-pointer (GCC 12 on x86_64 does so).
  struct { const char* name; uintptr_t address; bool frame_record; } samples[] = {
      {"CfiSampleLeaf", reinterpret_cast<uintptr_t>(&CfiSampleLeaf), false},
      {"CfiSampleFrame", reinterpret_cast<uintptr_t>(&CfiSampleFrame), true}};
  for (const auto& sample : samples) {
    uint64_t entry = sample.address - bias, size = 0;
    for (size_t i = 0; i < self.functions.size(); ++i) {
      if (self.names[i] == sample.name) {
        CHECK(self.functions[i].st_value == entry);  // the load bias is right
        size = self.functions[i].st_size;
      }
    }
    CHECK(size > 0);
    CfiRow r = Row(table, entry);
    CHECK(r.pc_begin == entry && !r.signal_frame && !r.cfa.is_expression);
#if defined(__x86_64__) || defined(__i386__)
    CHECK(Cfa(r, kRegSp, kWord) && r.return_address_register == droidheap::kRegPc);
#else
    CHECK(Cfa(r, kRegSp, 0) && r.return_address_register == 30);
    CHECK(r.regs[30].kind == RuleKind::kUnspecified || r.regs[30].kind == RuleKind::kSameValue);
#endif
    bool saw_frame_record = false;
    int rows = 0;
    for (uint64_t pc = entry; pc < entry + size; ++rows) {
      CHECK(rows < 1000);
      r = Row(table, pc);
      CHECK(r.pc_begin <= pc && pc < r.pc_end);
      CHECK(SameRow(r, Row(scanned, pc)));
      CHECK(!r.cfa.is_expression && (r.cfa.reg == kRegSp || r.cfa.reg == kRegFp));
      CHECK(r.cfa.offset >= 0);
#if defined(__x86_64__) || defined(__i386__)
      CHECK(Rule(r, droidheap::kRegPc, RuleKind::kOffset, -kWord));
      if (Cfa(r, kRegFp, 2 * kWord) && Rule(r, kRegFp, RuleKind::kOffset, -2 * kWord)) {
        saw_frame_record = true;
      }
#else
      // stp x29, x30, [sp, #-n]!: the frame record at the bottom of the frame.
      if (r.regs[29].kind == RuleKind::kOffset &&
          Rule(r, 30, RuleKind::kOffset, r.regs[29].value + 8)) {
        saw_frame_record = true;
      }
#endif
      pc = r.pc_end;
    }
    CHECK(saw_frame_record || !sample.frame_record);
    // A frame record: the entry row and at least one after the prologue (clang, the NDK's
    // compiler, describes the whole prologue in one row; GCC one row per step and the epilogue).
    CHECK(rows >= (sample.frame_record ? 2 : 1));
  }
  // Everything with a symbol: the hdr table and the scan agree, and nearly all is covered.
  size_t covered = 0;
  for (const Sym& fn : self.functions) {
    CfiRow a, b;
    bool found = table.FindRow(fn.st_value + fn.st_size / 2, &a);
    CHECK(found == scanned.FindRow(fn.st_value + fn.st_size / 2, &b));
    if (found) CHECK(SameRow(a, b));
    covered += found;
  }
  CHECK(covered * 10 >= self.functions.size() * 9);
  printf("own .eh_frame: %zu of %zu functions covered\n", covered, self.functions.size());
#if defined(__x86_64__) || defined(__i386__)
  // The linker's CFI for lazy-binding PLT entries: CFA = sp + one word, or + two once the entry
  // has pushed its relocation index (offset 11 on).
  CfiRow plt;
  if (self.plt_size >= 32 && table.FindRow(self.plt_vaddr + 16, &plt) && plt.cfa.is_expression) {
    RegisterContext context;
    context.regs[kRegSp] = 0x7000;
    uint64_t cfa;
    for (uint64_t offset : {0, 6, 11, 15}) {
      context.regs[droidheap::kRegPc] = self.plt_vaddr + 16 + offset;
      CHECK(droidheap::EvaluateExpression(plt.cfa.expression, plt.cfa.expression_size, context,
                                          false, 0, &cfa));
      CHECK(cfa == 0x7000u + (offset >= 11 ? 2 : 1) * kWord);
    }
    printf("own .plt: CFA expression checked\n");
  }
#endif
}

}  // namespace

int main() {
#if defined(__arm__)
  // armeabi-v7a code is described by .ARM.exidx; its .eh_frame, when there is one, is not this.
  printf("dwarf_cfi_own_binary_test: skipped on armeabi-v7a\n");
  return 0;
#endif
  TestOwnEhFrame();
  printf("dwarf_cfi_own_binary_test: ok\n");
  return 0;
}

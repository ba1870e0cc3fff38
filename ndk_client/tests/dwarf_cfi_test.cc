// CfiTable: CIE/FDE parsing of both sections' formats, every CFA instruction we support,
// .eh_frame_hdr lookups, and malformed input that must yield no row rather than a crash; then the
// test binary's own CFI is checked by dwarf_cfi_own_binary_test.cc.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "tests/dwarf_test_util.h"
#include "tests/test_util.h"
#include "unwinder/dwarf_cfi.h"

using droidheap::CfiRow;
using droidheap::CfiSectionView;
using droidheap::CfiTable;
using droidheap::RuleKind;

namespace {

// .eh_frame at `vaddr`; FDE addresses are DW_EH_PE_pcrel|sdata4 (augmentation data 0x1b).
struct EhFrame {
  Bytes b;
  uint64_t vaddr = 0x10000;
  size_t Cie(const char* aug, uint64_t caf, int64_t daf, uint64_t ra, const Bytes& aug_data,
             const Bytes& insns, uint8_t version = 1) {
    size_t start = b.size();
    b.u32(0).u32(0).u8(version).str(aug).uleb(caf).sleb(daf);
    if (version == 1) b.u8(ra); else b.uleb(ra);
    if (aug[0] == 'z') b.block(aug_data);
    b.add(insns);
    b.put(start, b.size() - start - 4, 4);
    return start;
  }
  size_t Fde(size_t cie, uint64_t pc, uint64_t range, const Bytes& insns,
             const Bytes& aug_data = Bytes()) {
    size_t start = b.size();
    b.u32(0);
    b.u32(b.size() - cie);
    b.u32(pc - (vaddr + b.size())).u32(range).block(aug_data).add(insns);
    b.put(start, b.size() - start - 4, 4);
    return start;
  }
  CfiSectionView view() const { return {b.v.data(), b.v.size(), vaddr}; }
};

// .debug_frame, 32- or 64-bit DWARF format; addresses are absolute and 8 bytes.
struct DebugFrame {
  Bytes b;
  bool dwarf64 = false;
  size_t Begin() {
    size_t start = b.size();
    if (dwarf64) b.u32(0xffffffff).u64(0); else b.u32(0);
    return start;
  }
  void End(size_t start) {
    if (dwarf64) {
      b.put(start + 4, b.size() - start - 12, 8);
    } else {
      b.put(start, b.size() - start - 4, 4);
    }
  }
  size_t Cie(uint8_t version, uint64_t caf, int64_t daf, uint64_t ra, const Bytes& insns) {
    size_t start = Begin();
    b.le(~uint64_t{0}, dwarf64 ? 8 : 4).u8(version).str("");
    if (version >= 4) b.u8(8).u8(0);
    b.uleb(caf).sleb(daf);
    if (version == 1) b.u8(ra); else b.uleb(ra);
    b.add(insns);
    End(start);
    return start;
  }
  size_t Fde(size_t cie, uint64_t pc, uint64_t range, const Bytes& insns) {
    size_t start = Begin();
    b.le(cie, dwarf64 ? 8 : 4).u64(pc).u64(range).add(insns);
    End(start);
    return start;
  }
  CfiSectionView view() const { return {b.v.data(), b.v.size(), 0}; }
};

// .eh_frame_hdr at `hdr_vaddr` for `eh`, with the search table (pc, FDE offset).
Bytes MakeHdr(const EhFrame& eh, uint64_t hdr_vaddr,
              const std::vector<std::pair<uint64_t, size_t>>& table, uint8_t table_enc = 0x3b) {
  Bytes h;
  h.u8(1).u8(0x1b).u8(0x03).u8(table_enc);
  h.u32(eh.vaddr - (hdr_vaddr + 4)).u32(table.size());
  for (auto& [pc, offset] : table) h.u32(pc - hdr_vaddr).u32(eh.vaddr + offset - hdr_vaddr);
  return h;
}

const Bytes kR = Bytes().u8(0x1b);  // 'R' data: pcrel|sdata4

bool HasRow(const CfiTable& table, uint64_t pc) {
  CfiRow row;
  return table.FindRow(pc, &row);
}

bool Cfa(const CfiRow& row, uint32_t reg, int64_t offset) {
  return !row.cfa.is_expression && row.cfa.reg == reg && row.cfa.offset == offset;
}

bool Rule(const CfiRow& row, int reg, RuleKind kind, int64_t value = 0) {
  return row.regs[reg].kind == kind && row.regs[reg].value == value;
}

// A typical frame-pointer prologue with remember/restore state around an early return.
void TestPrologueRowsAndRanges() {
  EhFrame eh;
  size_t cie = eh.Cie("zR", 1, -8, 16, kR, Bytes().u8(0x0c).uleb(7).uleb(8).u8(0x90).uleb(1));
  Bytes insns;
  insns.u8(0x41).u8(0x0e).uleb(16).u8(0x86).uleb(2);  // +1: cfa = r7+16, r6 at cfa-16
  insns.u8(0x43).u8(0x0d).uleb(6);                    // +3: cfa = r6+16
  insns.u8(0x02).u8(0x20).u8(0x0a).u8(0x0c).uleb(7).uleb(8).u8(0xc6);  // remember; epilogue
  insns.u8(0x41).u8(0x0b);                                             // restore_state
  insns.u8(0x03).u16(0x50).u8(0x0e).uleb(32);                          // advance_loc2
  insns.u8(0x04).u32(0x10).u8(0x07).uleb(6);                           // advance_loc4
  eh.Fde(cie, 0x1000, 0x100, insns);
  eh.b.u32(0);  // terminator
  CfiTable table(eh.view(), kNone, kNone);
  CHECK(!table.empty());

  CfiRow r = Row(table, 0x1000);
  CHECK(Cfa(r, 7, 8) && Rule(r, 16, RuleKind::kOffset, -8) && Rule(r, 6, RuleKind::kUnspecified));
  CHECK(r.return_address_register == 16 && !r.signal_frame);
  CHECK(r.pc_begin == 0x1000 && r.pc_end == 0x1001);
  r = Row(table, 0x1003);
  CHECK(Cfa(r, 7, 16) && Rule(r, 6, RuleKind::kOffset, -16));
  CHECK(r.pc_begin == 0x1001 && r.pc_end == 0x1004);
  r = Row(table, 0x1010);
  CHECK(Cfa(r, 6, 16) && r.pc_begin == 0x1004 && r.pc_end == 0x1024);
  r = Row(table, 0x1024);
  CHECK(Cfa(r, 7, 8) && Rule(r, 6, RuleKind::kUnspecified) && Rule(r, 16, RuleKind::kOffset, -8));
  CHECK(r.pc_begin == 0x1024 && r.pc_end == 0x1025);
  r = Row(table, 0x1025);  // restore_state brought back the CFA rule as well as r6's
  CHECK(Cfa(r, 6, 16) && Rule(r, 6, RuleKind::kOffset, -16) && r.pc_end == 0x1075);
  r = Row(table, 0x1080);
  CHECK(Cfa(r, 6, 32) && r.pc_begin == 0x1075 && r.pc_end == 0x1085);
  r = Row(table, 0x10ff);
  CHECK(Rule(r, 6, RuleKind::kUndefined) && r.pc_begin == 0x1085 && r.pc_end == 0x1100);
  CHECK(!HasRow(table, 0xfff) && !HasRow(table, 0x1100));
}

// Every other instruction, with code alignment 4 and a signal-frame CIE (version 3).
void TestInstructionSet() {
  EhFrame eh;
  Bytes cie_insns = Bytes().u8(0x0c).uleb(31).uleb(0).u8(0x2d).u8(0x08).uleb(3);
  size_t cie = eh.Cie("zRS", 4, -4, 30, kR, cie_insns, 3);
  Bytes cfa_expr = Bytes().u8(0x70 + 31).sleb(8);
  Bytes in;
  in.u8(0x05).uleb(3).uleb(2);                                    // offset_extended: -8
  in.u8(0x11).uleb(12).sleb(-3);                                  // offset_extended_sf: +12
  in.u8(0x09).uleb(5).uleb(4);                                    // register
  in.u8(0x09).uleb(9).uleb(40);                                   // from an untracked register
  in.u8(0x08).uleb(19);                                           // same_value
  in.u8(0x14).uleb(20).uleb(2);                                   // val_offset: -8
  in.u8(0x15).uleb(21).sleb(-2);                                  // val_offset_sf: +8
  in.u8(0x10).uleb(22).block(Bytes().u8(0x23).uleb(8));           // expression
  in.u8(0x16).uleb(23).block(Bytes().u8(0x30));                   // val_expression
  in.u8(0x2f).uleb(24).uleb(2);                                   // negative_offset_extended: +8
  in.u8(0x05).uleb(40).uleb(1).u8(0x10).uleb(100).block(cfa_expr);  // dropped registers
  in.u8(0x2e).uleb(16).u8(0x00).u8(0x2d);                         // args_size, nop, window_save
  in.u8(0x12).uleb(29).sleb(-4);                                  // def_cfa_sf: r29+16
  in.u8(0x13).sleb(-8);                                           // def_cfa_offset_sf: +32
  in.u8(0x41).u8(0x0f).block(cfa_expr).u8(0x06).uleb(3).u8(0x06).uleb(19);  // +4
  in.u8(0x01);                                                    // set_loc 0x2040 (pcrel)
  in.u32(0x2040 - (eh.vaddr + eh.b.size() + 4 + 4 + 4 + 4 + 1 + in.size()));
  in.u8(0x0c).uleb(31).uleb(48);
  eh.Fde(cie, 0x2000, 0x100, in);

  CfiTable table(eh.view(), kNone, kNone);
  CfiRow r = Row(table, 0x2003);
  CHECK(r.signal_frame && r.return_address_register == 30);
  CHECK(r.pc_begin == 0x2000 && r.pc_end == 0x2004 && Cfa(r, 29, 32));
  CHECK(Rule(r, 3, RuleKind::kOffset, -8) && Rule(r, 12, RuleKind::kOffset, 12));
  CHECK(Rule(r, 5, RuleKind::kRegister, 4) && Rule(r, 9, RuleKind::kUndefined));
  CHECK(Rule(r, 19, RuleKind::kSameValue) && Rule(r, 20, RuleKind::kValOffset, -8));
  CHECK(Rule(r, 21, RuleKind::kValOffset, 8) && Rule(r, 24, RuleKind::kOffset, 8));
  CHECK(r.regs[22].kind == RuleKind::kExpression && r.regs[22].expression_size == 2);
  CHECK(r.regs[22].expression[0] == 0x23 && r.regs[22].expression[1] == 8);
  CHECK(r.regs[23].kind == RuleKind::kValExpression && r.regs[23].expression_size == 1);
  r = Row(table, 0x2004);
  CHECK(r.cfa.is_expression && r.cfa.expression_size == 2 && r.cfa.expression[0] == 0x8f);
  CHECK(Rule(r, 3, RuleKind::kSameValue) && Rule(r, 19, RuleKind::kUnspecified));  // CIE's rules
  CHECK(r.pc_begin == 0x2004 && r.pc_end == 0x2040);
  r = Row(table, 0x20ff);
  CHECK(Cfa(r, 31, 48) && r.pc_begin == 0x2040 && r.pc_end == 0x2100);
}

// Personality (indirect, skipped), LSDA in the FDE's augmentation data, and the AArch64 letters.
void TestAugmentations() {
  EhFrame eh;
  Bytes cfa = Bytes().u8(0x0c).uleb(7).uleb(8);
  Bytes plr = Bytes().u8(0x9b).u32(0x1234).u8(0x1b).u8(0x1b);
  size_t c1 = eh.Cie("zPLR", 1, -8, 16, plr, cfa);
  size_t c2 = eh.Cie("zRBG", 1, -8, 16, kR, cfa);
  size_t c3 = eh.Cie("", 1, -8, 16, Bytes(), cfa);  // no 'R': absolute 8-byte addresses
  size_t c4 = eh.Cie("zRX", 1, -8, 16, Bytes().u8(0x1b).u8(0x77), cfa);  // unknown letter last
  eh.Fde(c1, 0x1000, 0x10, Bytes(), Bytes().u32(0x4444));
  eh.Fde(c2, 0x2000, 0x10, Bytes());
  size_t start = eh.b.size();
  eh.b.u32(0).u32(eh.b.size() - c3).u64(0x3000).u64(0x10);
  eh.b.put(start, eh.b.size() - start - 4, 4);
  eh.Fde(c4, 0x4000, 0x10, Bytes());
  CfiTable table(eh.view(), kNone, kNone);
  for (uint64_t pc : {0x1000, 0x2008, 0x300f, 0x4000}) CHECK(Cfa(Row(table, pc), 7, 8));
  CHECK(!Row(table, 0x2000).signal_frame);
}

void TestDebugFrameFormats() {
  for (bool dwarf64 : {false, true}) {
    DebugFrame df;
    df.dwarf64 = dwarf64;
    size_t v1 = df.Cie(1, 1, -8, 16, Bytes().u8(0x0c).uleb(7).uleb(8));
    df.b.u32(0);  // zero-length padding is skipped in .debug_frame
    size_t v3 = df.Cie(3, 4, -8, 30, Bytes().u8(0x0c).uleb(31).uleb(0));
    size_t v4 = df.Cie(4, 1, -8, 16, Bytes().u8(0x0c).uleb(6).uleb(16));
    df.Fde(v1, 0x1000, 0x10, Bytes().u8(0x41).u8(0x0e).uleb(16));
    df.b.u32(0);
    df.Fde(v3, 0x2000, 0x10, Bytes().u8(0x41).u8(0x9d).uleb(2));  // +4: x29 at cfa-16
    df.Fde(v4, 0x3000, 0x10, Bytes().u8(0x01).u64(0x3008).u8(0x0e).uleb(24));
    CfiTable table(kNone, kNone, df.view());
    CfiRow r = Row(table, 0x1001);
    CHECK(Cfa(r, 7, 16) && r.pc_begin == 0x1001 && r.pc_end == 0x1010);
    r = Row(table, 0x2004);
    CHECK(Rule(r, 29, RuleKind::kOffset, -16) && r.return_address_register == 30);
    CHECK(Cfa(Row(table, 0x3007), 6, 16) && Cfa(Row(table, 0x3008), 6, 24));
    CHECK(!HasRow(table, 0x1010) && !HasRow(table, 0x2fff));
  }
}

// .eh_frame wins where both sections cover a pc; .debug_frame fills the gaps.
void TestEhFramePreferredOverDebugFrame() {
  EhFrame eh;
  size_t cie = eh.Cie("zR", 1, -8, 16, kR, Bytes().u8(0x0c).uleb(7).uleb(8));
  eh.Fde(cie, 0x1000, 0x10, Bytes());
  DebugFrame df;
  size_t dcie = df.Cie(1, 1, -8, 16, Bytes().u8(0x0c).uleb(6).uleb(16));
  df.Fde(dcie, 0x1000, 0x10, Bytes());
  df.Fde(dcie, 0x5000, 0x10, Bytes());
  CfiTable table(eh.view(), kNone, df.view());
  CHECK(Cfa(Row(table, 0x1004), 7, 8) && Cfa(Row(table, 0x5004), 6, 16));
}

// The hdr's table is searched: FDEs after an .eh_frame terminator are invisible to a scan but
// found through it. A table with a foreign encoding or eh_frame_ptr falls back to the scan.
void TestEhFrameHdr() {
  EhFrame eh;
  size_t cie = eh.Cie("zR", 1, -8, 16, kR, Bytes().u8(0x0c).uleb(7).uleb(8));
  std::vector<std::pair<uint64_t, size_t>> entries;
  for (uint64_t i = 0; i < 50; ++i) {
    if (i == 25) eh.b.u32(0);
    entries.push_back({0x1000 + i * 0x20, eh.Fde(cie, 0x1000 + i * 0x20, 0x10, Bytes())});
  }
  const uint64_t hdr_vaddr = 0x8000;
  Bytes hdr = MakeHdr(eh, hdr_vaddr, entries);
  CfiTable table(eh.view(), {hdr.v.data(), hdr.size(), hdr_vaddr}, kNone);
  for (uint64_t i = 0; i < 50; ++i) {
    CfiRow r = Row(table, 0x1000 + i * 0x20 + 3);
    CHECK(Cfa(r, 7, 8) && r.pc_begin == 0x1000 + i * 0x20 && r.pc_end == r.pc_begin + 0x10);
    CHECK(!HasRow(table, 0x1000 + i * 0x20 + 0x10));  // the gap between functions
  }
  CHECK(!HasRow(table, 0xfff) && !HasRow(table, 0x2000));

  Bytes other = MakeHdr(eh, hdr_vaddr, entries, 0x1b);
  Bytes foreign = MakeHdr(eh, hdr_vaddr, entries);
  foreign.put(4, 0x100, 4);
  for (const Bytes* h : {&other, &foreign}) {
    CfiTable scanned(eh.view(), {h->v.data(), h->size(), hdr_vaddr}, kNone);
    CHECK(HasRow(scanned, 0x1000 + 24 * 0x20) && !HasRow(scanned, 0x1000 + 25 * 0x20));
  }
  // A table pointing at garbage finds nothing but crashes nothing.
  Bytes bad = MakeHdr(eh, hdr_vaddr, {{0x1000, 2}, {0x1020, 1u << 30}, {0x1040, 0}});
  CfiTable hostile(eh.view(), {bad.v.data(), bad.size(), hdr_vaddr}, kNone);
  for (uint64_t pc = 0xff0; pc < 0x1100; ++pc) HasRow(hostile, pc);
  CHECK(!HasRow(hostile, 0x1000) && !HasRow(hostile, 0x1020));
  // Two entries for one pc: the one that parses wins, whichever comes first.
  Bytes twice = MakeHdr(eh, hdr_vaddr, {{0x1000, entries[0].second}, {0x1000, 2}});
  CfiTable duplicates(eh.view(), {twice.v.data(), twice.size(), hdr_vaddr}, kNone);
  CHECK(Cfa(Row(duplicates, 0x1004), 7, 8) && !HasRow(duplicates, 0x1020));
}

// Each of these sections must give no row for 0x1000 (and not crash).
void TestMalformed() {
  Bytes good_cie_insns = Bytes().u8(0x0c).uleb(7).uleb(8);
  auto with_fde = [&](const char* aug, const Bytes& aug_data, const Bytes& fde_insns,
                      const Bytes& cie_insns, uint8_t version, uint64_t ra) {
    EhFrame eh;
    size_t cie = eh.Cie(aug, 1, -8, ra, aug_data, cie_insns, version);
    eh.Fde(cie, 0x1000, 0x10, fde_insns);
    return eh;
  };
  std::vector<EhFrame> cases;
  const Bytes none;
  cases.push_back(with_fde("zR", Bytes().u8(0x0f), none, good_cie_insns, 1, 16));  // bad format
  cases.push_back(with_fde("zR", Bytes().u8(0x9b), none, good_cie_insns, 1, 16));  // indirect
  cases.push_back(with_fde("zR", Bytes().u8(0x7b), none, good_cie_insns, 1, 16));  // bad appl.
  cases.push_back(with_fde("zR", Bytes().u8(0xff), none, good_cie_insns, 1, 16));  // omit
  cases.push_back(with_fde("zR", Bytes().u8(0x3b), none, good_cie_insns, 1, 16));  // datarel
  cases.push_back(with_fde("zXR", Bytes().u8(0).u8(0x1b), none, good_cie_insns, 1, 16));
  cases.push_back(with_fde("Q", none, none, good_cie_insns, 1, 16));   // unknown, no 'z'
  cases.push_back(with_fde("zR", kR, none, good_cie_insns, 2, 16));   // version 2
  cases.push_back(with_fde("zR", kR, none, good_cie_insns, 1, 40));   // RA column untracked
  cases.push_back(with_fde("zR", kR, none, none, 1, 16));             // no CFA rule
  cases.push_back(with_fde("zR", kR, Bytes().u8(0x0b), good_cie_insns, 1, 16));  // empty stack
  cases.push_back(with_fde("zR", kR, Bytes().u8(0x85), good_cie_insns, 1, 16));  // truncated
  cases.push_back(with_fde("zR", kR, Bytes().u8(0x0c).uleb(100).uleb(0), good_cie_insns, 1, 16));
  cases.push_back(with_fde("zR", kR, Bytes().u8(0x0e).uleb(8), none, 1, 16));   // offset, no CFA
  cases.push_back(with_fde("zR", kR, Bytes().u8(0x3f), good_cie_insns, 1, 16));  // unknown op
  cases.push_back(with_fde("zR", kR, Bytes().u8(0x0f).uleb(50), good_cie_insns, 1, 16));
  cases.push_back(with_fde("zR", kR, none, Bytes().u8(0x41), 1, 16));  // advance in a CIE
  Bytes deep;
  for (int i = 0; i < 65; ++i) deep.u8(0x0a);
  cases.push_back(with_fde("zR", kR, deep, good_cie_insns, 1, 16));
  Bytes endless(Bytes().add(good_cie_insns));
  endless.v.resize(endless.size() + 200000, 0x00);  // over the instruction bound
  cases.push_back(with_fde("zR", kR, endless, good_cie_insns, 1, 16));
  {
    EhFrame eh;  // an FDE whose CIE pointer points at itself
    eh.b.u32(12).u32(4).u32(0x1000 - (eh.vaddr + 8)).u32(0x10);
    cases.push_back(eh);
  }
  {
    EhFrame eh;  // a CIE pointer before the section
    eh.Cie("zR", 1, -8, 16, kR, good_cie_insns);
    eh.b.u32(12).u32(0x7fffffff).u32(0).u32(0x10);
    cases.push_back(eh);
  }
  for (const EhFrame& eh : cases) {
    CfiTable table(eh.view(), kNone, kNone);
    CHECK(!HasRow(table, 0x1000));
    // Every truncation of the same bytes.
    for (size_t n = 0; n < eh.b.size(); ++n) {
      CfiTable truncated({eh.b.v.data(), n, eh.vaddr}, kNone, kNone);
      HasRow(truncated, 0x1000);
    }
  }
  // Lengths past the end, reserved lengths, a 64-bit length past the end, a lone byte.
  for (uint64_t length : {0x100u, 0xfffffff0u, 0xffffffffu}) {
    Bytes b;
    b.u32(length).u64(0x8000000000000000).u32(0);
    CfiTable eh({b.v.data(), b.size(), 0}, kNone, kNone);
    CfiTable df(kNone, kNone, {b.v.data(), b.size(), 0});
    CHECK(eh.empty() && df.empty());
  }
  // A .debug_frame CIE pointer past the end or at an FDE.
  DebugFrame df;
  df.Fde(0x7fff0000, 0x1000, 0x10, Bytes());
  df.Fde(0, 0x1000, 0x10, Bytes());
  CHECK(CfiTable(kNone, kNone, df.view()).empty());
}


}  // namespace

int main() {
  TestPrologueRowsAndRanges();
  TestInstructionSet();
  TestAugmentations();
  TestDebugFrameFormats();
  TestEhFramePreferredOverDebugFrame();
  TestEhFrameHdr();
  TestMalformed();
  printf("dwarf_cfi_test: ok\n");
  return 0;
}

// Call-frame information of one ELF file (DWARF 5 section 6.4; the LSB's .eh_frame and
// .eh_frame_hdr): finds the FDE covering a pc and runs its CIE's and its own CFA programs up to
// that pc, giving the rules that recover the caller's registers.
//
// A CfiTable is a read-only view over section bytes owned by the caller (the ElfFile that mapped
// them); it is built once per file and used by the unwinding worker that owns that file's cache.
// Files are untrusted input: nothing here reads outside the given views, loops without bound or
// trusts a length, and malformed CFI simply yields no row.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "unwinder/registers.h"

namespace droidheap {

enum class RuleKind : uint8_t {
  kUnspecified,    // no rule: the register keeps its value (callee-saved convention)
  kUndefined,      // the caller's value is lost; for the return address: the outermost frame
  kSameValue,      // keeps its value
  kOffset,         // saved at address CFA + value
  kValOffset,      // is CFA + value
  kRegister,       // is in register `value`
  kExpression,     // saved at the address the expression gives, CFA pushed first
  kValExpression,  // is the value the expression gives, CFA pushed first
};

struct RegisterRule {
  RuleKind kind = RuleKind::kUnspecified;
  int64_t value = 0;                    // offset or register number, by kind
  const uint8_t* expression = nullptr;  // the expression kinds: DWARF expression bytes (in the view)
  uint32_t expression_size = 0;
};

struct CfaRule {
  bool is_expression = false;
  uint32_t reg = 0;  // CFA = reg + offset
  int64_t offset = 0;
  const uint8_t* expression = nullptr;  // CFA = value of the expression (nothing pushed first)
  uint32_t expression_size = 0;
};

struct CfiRow {
  CfaRule cfa;
  // Rules for registers numbered kMaxRegisters and above (vector registers) are parsed and dropped.
  RegisterRule regs[kMaxRegisters];
  uint32_t return_address_register = 0;
  bool signal_frame = false;  // CIE augmentation 'S': the pc is exact, not a return address
  uint64_t pc_begin = 0;      // [pc_begin, pc_end): the ELF addresses where this row holds
  uint64_t pc_end = 0;
};

// One section's bytes and its address in the ELF's virtual address space (for DW_EH_PE_pcrel and
// DW_EH_PE_datarel pointers). An empty view (size 0) means the file has no such section.
// address_size is the file's (4 for ELFCLASS32): the size of DW_EH_PE_absptr pointers and of
// .debug_frame addresses before version 4, and where addresses wrap.
struct CfiSectionView {
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint64_t vaddr = 0;
  uint8_t address_size = 8;
};

class CfiTable {
 public:
  // Uses .eh_frame_hdr's sorted search table to find .eh_frame FDEs when it is present and sane;
  // otherwise (and always for .debug_frame) indexes the FDEs with one scan, here.
  CfiTable(CfiSectionView eh_frame, CfiSectionView eh_frame_hdr, CfiSectionView debug_frame);

  // The row for `elf_pc`, an address in the ELF's address space (for a return address the caller
  // passes return address - 1). False when no FDE covers it or its CFI is malformed.
  bool FindRow(uint64_t elf_pc, CfiRow* row) const;

  bool empty() const;
  // What its indexes hold (the sections' bytes are the caller's).
  size_t memory_bytes() const {
    return (index_.capacity() + debug_index_.capacity()) * sizeof(FdeIndexEntry);
  }

 private:
  struct FdeIndexEntry {
    uint64_t pc_begin;
    uint64_t pc_end;
    uint64_t fde_offset;  // in its section
  };
  // Points hdr_table_ at .eh_frame_hdr's search table when it is one we can binary-search.
  bool UseHdrTable();
  // Every FDE of one section with a parsable CIE and a non-empty range, sorted by pc_begin.
  std::vector<FdeIndexEntry> IndexSection(bool debug_frame) const;
  bool FindRowViaHdrTable(uint64_t pc, CfiRow* row) const;
  bool FindRowViaIndex(const std::vector<FdeIndexEntry>& index, bool debug_frame, uint64_t pc,
                       CfiRow* row) const;
  bool RowFromFde(bool debug_frame, uint64_t fde_offset, uint64_t pc, CfiRow* row) const;

  CfiSectionView eh_frame_;
  CfiSectionView eh_frame_hdr_;
  CfiSectionView debug_frame_;
  const uint8_t* hdr_table_ = nullptr;  // hdr_count_ pairs of datarel sdata4 (pc, FDE address)
  size_t hdr_count_ = 0;
  std::vector<FdeIndexEntry> index_;        // .eh_frame, when the hdr table is not usable
  std::vector<FdeIndexEntry> debug_index_;  // .debug_frame
};

// What a DWARF expression (section 2.5) may read while it is evaluated for a CFA or register rule,
// and the target's address size (4 or 8 bytes): the size of the generic type the expression
// computes with, of DW_OP_addr's operand and of a DW_OP_deref.
class ExpressionContext {
 public:
  virtual ~ExpressionContext() = default;
  virtual uint32_t AddressSize() const = 0;
  virtual bool ReadRegister(uint32_t reg, uint64_t* value) const = 0;
  // Reads one address-sized word, zero-extended.
  virtual bool ReadMemory(uint64_t address, uint64_t* value) const = 0;
};

// Evaluates `expression` (with `initial` pushed first when `push_initial`: the CFA, for register
// rules) and returns the value on top of the stack. False on any malformed or unsupported
// operation, stack underflow/overflow, failed read, or more than a bounded number of steps.
bool EvaluateExpression(const uint8_t* expression, size_t size, const ExpressionContext& context,
                        bool push_initial, uint64_t initial, uint64_t* result);

}  // namespace droidheap

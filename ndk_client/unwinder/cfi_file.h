// The unwind tables of one ELF file on disk (a whole file, or an APK's entry: ElfLocation): its
// .eh_frame, .eh_frame_hdr and .debug_frame sections, found through the section headers (or
// through PT_GNU_EH_FRAME when the file has none) and read into the daemon's memory
// (file_reads.h: the file is the profiled process's, which may truncate or swap it at any time),
// handed to a CfiTable that views them there. A 32-bit ARM file's EHABI table (PT_ARM_EXIDX) and
// the .ARM.extab entries it names are read likewise, for an ArmExidxTable.
// Owned by the ElfCache of one unwinding worker.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include "unwinder/arm_exidx.h"
#include "unwinder/dwarf_cfi.h"
#include "unwinder/file_reads.h"
#include "unwinder/mapped_file.h"

namespace droidheap {

class CfiFile {
 public:
  // The ELF file at `location` in the file `id` mapped at `path` (mapped_file.h). Nullptr when
  // that file cannot be opened, is not the one mapped, or holds no ELF file of a known ABI
  // (elf_info.h), 32- or 64-bit, there. Nothing outside `location` is read, and no table whose
  // bytes `allowance` does not cover (the file then has fewer tables; allowance->exhausted()).
  static std::unique_ptr<CfiFile> Open(const std::string& path, const MappedFileId& id,
                                       const ElfLocation& location, ReadAllowance* allowance);
  CfiFile(const CfiFile&) = delete;
  CfiFile& operator=(const CfiFile&) = delete;

  const CfiTable& table() const { return *table_; }
  // Nullptr unless the file is a 32-bit ARM file with a PT_ARM_EXIDX segment.
  const ArmExidxTable* exidx() const { return exidx_.get(); }
  // What the tables hold in the daemon's memory.
  size_t memory_bytes() const;

 private:
  CfiFile() = default;

  std::vector<uint8_t> eh_frame_;
  std::vector<uint8_t> eh_frame_hdr_;
  std::vector<uint8_t> debug_frame_;
  std::vector<uint8_t> arm_tables_;  // .ARM.exidx and the .ARM.extab entries it names
  std::unique_ptr<CfiTable> table_;
  std::unique_ptr<ArmExidxTable> exidx_;
};

}  // namespace droidheap

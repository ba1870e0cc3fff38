// The unwind tables of one ELF file on disk: the file is mapped read-only once and its .eh_frame,
// .eh_frame_hdr and .debug_frame sections are handed to a CfiTable that views them in place.
// Found through the section headers, or through PT_GNU_EH_FRAME when the file has none. A 32-bit
// ARM file's EHABI table (PT_ARM_EXIDX) is viewed in place too, by an ArmExidxTable.
// Owned by the ElfCache of one unwinding worker; the mapping lives as long as the CfiFile.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>

#include "unwinder/arm_exidx.h"
#include "unwinder/dwarf_cfi.h"
#include "unwinder/mapped_file.h"

namespace droidheap {

class CfiFile {
 public:
  // The file `id` mapped at `path` (mapped_file.h). Nullptr when that file cannot be opened or
  // mapped, is not the one mapped, or is not an ELF file of a known ABI (elf_info.h), 32- or
  // 64-bit.
  static std::unique_ptr<CfiFile> Open(const std::string& path, const MappedFileId& id);
  ~CfiFile();
  CfiFile(const CfiFile&) = delete;
  CfiFile& operator=(const CfiFile&) = delete;

  const CfiTable& table() const { return *table_; }
  // Nullptr unless the file is a 32-bit ARM file with a PT_ARM_EXIDX segment.
  const ArmExidxTable* exidx() const { return exidx_.get(); }

 private:
  CfiFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  const uint8_t* data_;
  size_t size_;
  std::unique_ptr<CfiTable> table_;
  std::unique_ptr<ArmExidxTable> exidx_;
};

}  // namespace droidheap

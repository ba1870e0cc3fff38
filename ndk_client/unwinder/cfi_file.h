// The unwind tables of one ELF file on disk (a whole file, or an APK's entry: ElfLocation): its
// bytes are mapped read-only once and its .eh_frame,
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
  // The ELF file at `location` in the file `id` mapped at `path` (mapped_file.h). Nullptr when
  // that file cannot be opened or mapped, is not the one mapped, or holds no ELF file of a known
  // ABI (elf_info.h), 32- or 64-bit, there. Nothing outside `location` is read.
  static std::unique_ptr<CfiFile> Open(const std::string& path, const MappedFileId& id,
                                       const ElfLocation& location);
  ~CfiFile();
  CfiFile(const CfiFile&) = delete;
  CfiFile& operator=(const CfiFile&) = delete;

  const CfiTable& table() const { return *table_; }
  // Nullptr unless the file is a 32-bit ARM file with a PT_ARM_EXIDX segment.
  const ArmExidxTable* exidx() const { return exidx_.get(); }

 private:
  CfiFile(void* mapped, size_t mapped_size, size_t skip)
      : mapped_(mapped), mapped_size_(mapped_size),
        data_(static_cast<const uint8_t*>(mapped) + skip), size_(mapped_size - skip) {}

  void* mapped_;  // from the page holding the ELF file's first byte
  size_t mapped_size_;
  const uint8_t* data_;  // the ELF file's bytes
  size_t size_;
  std::unique_ptr<CfiTable> table_;
  std::unique_ptr<ArmExidxTable> exidx_;
};

}  // namespace droidheap

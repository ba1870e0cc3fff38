// What the daemon needs to know about a mapped ELF file: its build id and the load bias of each
// loadable segment, so that a pc becomes an ELF virtual address (rel_pc) the host can symbolize,
// and, for unwinding, its call-frame information and EHABI table.
// ElfCache is owned by one unwinding worker (not thread-safe) and reads each file once.
#pragma once

#include <stdint.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "unwinder/cfi_file.h"
#include "unwinder/mapped_file.h"

namespace droidheap {

struct ElfInfo {
  struct Segment {
    uint64_t offset;
    uint64_t vaddr;
    uint64_t file_size;
    uint64_t align;
    bool executable;
  };
  bool valid = false;
  uint16_t machine = 0;  // e_machine
  std::string build_id;  // raw bytes
  std::vector<Segment> loads;

  // p_vaddr - p_offset of the PT_LOAD that a mapping at `file_offset` (executable or not) maps.
  uint64_t LoadBiasAt(uint64_t file_offset, bool executable) const;
  // Whether an executable PT_LOAD lies in the file's bytes [file_offset, file_offset + size).
  bool HasCodeIn(uint64_t file_offset, uint64_t size) const;
};

// Reads the ELF header, program headers and GNU build-id note of the file `id` mapped at `path`
// (mapped_file.h); invalid when that is not the file there, or not a little-endian ELF file of one
// of the ABIs in registers.h (of either class: a 64-bit daemon reads a 32-bit app's files).
ElfInfo ReadElfInfo(const std::string& path, const MappedFileId& id);
// Whether e_ident and e_machine are those of such a file.
bool IsKnownElf(const unsigned char* ident, uint16_t machine);

class ElfCache {
 public:
  // Keyed by path and file identity, so a replaced file is read again; a file that is not the
  // one mapped is never read (its entry stays invalid).
  const ElfInfo& Get(const std::string& path, const MappedFileId& id);
  // The file's unwind tables, mapped on first use; nullptr when it cannot be read.
  const CfiTable* Cfi(const std::string& path, const MappedFileId& id);
  // Its EHABI table (32-bit ARM files), read with the CFI; nullptr when it has none.
  const ArmExidxTable* Exidx(const std::string& path, const MappedFileId& id);

 private:
  struct Entry {
    ElfInfo info;
    bool cfi_loaded = false;
    std::unique_ptr<CfiFile> cfi;
  };
  Entry& Lookup(const std::string& path, const MappedFileId& id);
  const CfiFile* LoadCfi(const std::string& path, const MappedFileId& id);

  std::map<std::tuple<std::string, MappedFileId>, Entry> entries_;
};

}  // namespace droidheap

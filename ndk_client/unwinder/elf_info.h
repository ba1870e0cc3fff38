// What the daemon needs to know about a mapped ELF file: its build id and the load bias of each
// loadable segment, so that a pc becomes an ELF virtual address (rel_pc) the host can symbolize,
// and, for unwinding, its call-frame information and EHABI table. The ELF file is the mapped file,
// or a library an APK stores (zip_entry.h), which the linker maps from inside the APK.
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
  ElfLocation location;
  // Why a mapped zip file holds no ELF file where it is mapped (a compressed entry, ...); empty
  // when valid or when the file is neither ELF nor zip.
  std::string problem;
  uint16_t machine = 0;  // e_machine
  std::string build_id;  // raw bytes
  std::vector<Segment> loads;

  // p_vaddr - p_offset of the PT_LOAD that a mapping at `elf_offset` (executable or not) maps.
  // Offsets here are the ELF file's own: a mapping's file offset less location.offset.
  uint64_t LoadBiasAt(uint64_t elf_offset, bool executable) const;
  // Whether an executable PT_LOAD lies in the ELF file's bytes [elf_offset, elf_offset + size).
  bool HasCodeIn(uint64_t elf_offset, uint64_t size) const;
};

// Reads the ELF header, program headers and GNU build-id note of the ELF file that a mapping at
// `mapping_offset` of the file `id` at `path` (mapped_file.h) maps; invalid when that is not the
// file there, or it holds no little-endian ELF file of one of the ABIs in registers.h (of either
// class: a 64-bit daemon reads a 32-bit app's files) there. Every read stays inside the ELF
// file's location.
ElfInfo ReadElfInfo(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
// Whether e_ident and e_machine are those of such a file.
bool IsKnownElf(const unsigned char* ident, uint16_t machine);

class ElfCache {
 public:
  // The ELF file a mapping at `mapping_offset` of the file `id` at `path` maps. Keyed by path and
  // file identity, so a replaced file is read again; a file that is not the one mapped is never
  // read (its entry stays invalid).
  const ElfInfo& Get(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
  // Its unwind tables, mapped on first use; nullptr when they cannot be read.
  const CfiTable* Cfi(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
  // Its EHABI table (32-bit ARM files), read with the CFI; nullptr when it has none.
  const ArmExidxTable* Exidx(const std::string& path, const MappedFileId& id,
                             uint64_t mapping_offset);
  // What was found wrong in mapped files since the last call (an APK's entry that no linker
  // maps), one line each, for the daemon's log.
  std::vector<std::string> TakeProblems();

 private:
  struct Entry {
    ElfInfo info;
    bool cfi_loaded = false;
    std::unique_ptr<CfiFile> cfi;
  };
  // (path, file, offset): of the ELF file in entries_, of a mapping in by_mapping_.
  using Key = std::tuple<std::string, MappedFileId, uint64_t>;
  Entry& Lookup(const std::string& path, const MappedFileId& id, uint64_t mapping_offset);
  const CfiFile* LoadCfi(const std::string& path, const MappedFileId& id,
                         uint64_t mapping_offset);

  std::map<Key, Entry> entries_;
  std::map<Key, Entry*> by_mapping_;  // into entries_ (whose nodes never move)
  std::vector<std::string> problems_;
};

}  // namespace droidheap

// A hostile file mapped by a profiled process, read as the daemon reads an app's APK
// (unwinder/zip_entry.h, elf_info.h, cfi_file.h): a zip directory and local headers of any
// content, an entry holding an ELF file whose headers claim anything, at the mapping offset the
// input picks. Nothing may read outside the file or the entry, loop without bound or trust a
// length; the unwind tables found are looked up at pcs the input picks.
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "fuzz/fuzz_input.h"
#include "unwinder/dwarf_cfi.h"
#include "unwinder/elf_info.h"

namespace {

// One file per fuzzing process, rewritten for each input (a new ElfCache reads it afresh).
const std::string& FilePath() {
  static const std::string path = [] {
    char name[] = "/tmp/apk_fuzzer.XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) abort();
    close(fd);
    return std::string(name);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  droidheap::FuzzInput input(data, size);
  const uint64_t mapping_offset = input.Take<uint32_t>();
  const uint32_t pcs[4] = {input.Take<uint32_t>(), input.Take<uint32_t>(), input.Take<uint32_t>(),
                           input.Take<uint32_t>()};
  size_t got;
  const uint8_t* file = input.TakeBytes(input.remaining(), &got);

  const std::string& path = FilePath();
  const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0 || (got > 0 && write(fd, file, got) != static_cast<ssize_t>(got))) abort();
  close(fd);
  struct stat st;
  if (stat(path.c_str(), &st) != 0) abort();
  const droidheap::MappedFileId id{major(st.st_dev), minor(st.st_dev),
                                   static_cast<uint64_t>(st.st_ino)};

  droidheap::ElfCache cache;
  const droidheap::ElfInfo& info = cache.Get(path, id, mapping_offset);
  if (info.valid && (info.location.offset > got || info.location.size > got - info.location.offset)) {
    abort();  // an ELF file said to lie outside the file
  }
  const droidheap::CfiTable* cfi = cache.Cfi(path, id, mapping_offset);
  for (uint32_t pc : pcs) {
    droidheap::CfiRow row;
    if (cfi != nullptr) cfi->FindRow(pc, &row);
    const droidheap::ArmExidxTable* exidx = cache.Exidx(path, id, mapping_offset);
    if (exidx != nullptr) exidx->Find(pc);
    info.LoadBiasAt(pc, true);
  }
  cache.TakeProblems();
  return 0;
}

// The unwind tables of a file that a profiled process maps, where the process makes that file as
// costly as it can (issue 53): truncated after the daemon read it, a section header naming a
// sparse hole of a terabyte, many files that together outgrow the cache. The daemon must not
// crash (a mapping of the file would SIGBUS once it is truncated), must not read what the file
// does not hold on disk, and must keep what it holds for files within its bound.
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/test_util.h"
#include "unwinder/dwarf_cfi.h"
#include "unwinder/elf_info.h"

using droidheap::CfiRow;
using droidheap::CfiTable;
using droidheap::ElfCache;

namespace {

struct Self {
  std::string path;
  std::string bytes;
  uint64_t function_vaddr = 0;  // of a function of this program, in its ELF address space
};

Self ReadSelf() {
  Self self;
  self.path = ProgramPath();
  self.bytes = ReadWholeFile(self.path);
  self.function_vaddr = reinterpret_cast<uintptr_t>(&ReadSelf) -
      LoadBiasOf(reinterpret_cast<uintptr_t>(&ReadSelf)) + 4;
  return self;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  CHECK(f != nullptr && fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  fclose(f);
}

uint64_t VmSizeKb() {
  const std::string status = ReadWholeFile("/proc/self/status");
  const size_t at = status.find("VmSize:");
  CHECK(at != std::string::npos);
  return strtoull(status.c_str() + at + 7, nullptr, 10);
}

// Every pc of the first `span` bytes of the ELF address space, 16 apart, looked up.
void LookUpEverywhere(const CfiTable& table, uint64_t span) {
  CfiRow row;
  for (uint64_t pc = 0; pc < span; pc += 16) table.FindRow(pc, &row);
}

// The process lets the daemon read its copy's tables, then truncates the copy to one page and
// samples at new pcs in it: the tables the daemon holds are its own memory.
void TestAFileTruncatedAfterItWasReadCrashesNothing(const Self& self, const std::string& dir) {
  const std::string copy = dir + "/truncated.so";
  WriteFile(copy, self.bytes);
  ElfCache cache;
  const CfiTable* cfi = cache.Cfi(copy, FileIdOf(copy), 0);
  CfiRow row;
  CHECK(cfi != nullptr && cfi->FindRow(self.function_vaddr, &row));
  CHECK(truncate(copy.c_str(), 4096) == 0);
  LookUpEverywhere(*cfi, self.bytes.size());
  CHECK(cfi->FindRow(self.function_vaddr, &row));
  // Read afresh, the truncated file has no tables left to read, and says so without a fault.
  ElfCache fresh;
  const CfiTable* cut = fresh.Cfi(copy, FileIdOf(copy), 0);
  CHECK(cut == nullptr || !cut->FindRow(self.function_vaddr, &row));
  unlink(copy.c_str());
}

// Renames the first section whose name is long enough to ".debug_frame" and points it at `size`
// bytes from `offset`.
template <typename Ehdr, typename Shdr>
void NameDebugFrame(std::string* bytes, uint64_t offset, uint64_t size) {
  Ehdr ehdr;
  memcpy(&ehdr, bytes->data(), sizeof(ehdr));
  Shdr names;
  memcpy(&names, bytes->data() + ehdr.e_shoff + ehdr.e_shstrndx * sizeof(Shdr), sizeof(names));
  for (int i = 0; i < ehdr.e_shnum; ++i) {
    const size_t at = ehdr.e_shoff + i * sizeof(Shdr);
    Shdr shdr;
    memcpy(&shdr, bytes->data() + at, sizeof(shdr));
    char* name = &(*bytes)[names.sh_offset + shdr.sh_name];
    if (strlen(name) < strlen(".debug_frame") || strncmp(name, ".eh_frame", 9) == 0 ||
        shdr.sh_type == SHT_NOBITS) {
      continue;
    }
    strcpy(name, ".debug_frame");
    shdr.sh_offset = offset;
    shdr.sh_size = size;
    memcpy(&(*bytes)[at], &shdr, sizeof(shdr));
    return;
  }
  CHECK(!"a section to rename");
}

// A copy whose section headers name a terabyte of hole as .debug_frame: 24 KiB on disk, as long as
// the process likes to scan. Nothing of the hole is read or mapped, and the file's .eh_frame
// still serves.
void TestASparseSectionCostsNothing(const Self& self, const std::string& dir) {
  const std::string copy = dir + "/sparse.so";
  const uint64_t hole_at = (self.bytes.size() + 0xfff) & ~0xfffull;
  uint64_t hole = uint64_t{1} << 40;
  std::string bytes = self.bytes;
  const bool is_64 = bytes[EI_CLASS] == ELFCLASS64;
  // A 32-bit file's section offsets and sizes are 32 bits: its hole is 4 GiB less a page.
  if (!is_64) hole = 0xffffffffull - hole_at;
  if (is_64) {
    NameDebugFrame<Elf64_Ehdr, Elf64_Shdr>(&bytes, hole_at, hole);
  } else {
    NameDebugFrame<Elf32_Ehdr, Elf32_Shdr>(&bytes, hole_at, hole);
  }
  WriteFile(copy, bytes);
  CHECK(truncate(copy.c_str(), static_cast<off_t>(hole_at + hole)) == 0);
  const uint64_t vm_before = VmSizeKb();
  ElfCache cache;
  const CfiTable* cfi = cache.Cfi(copy, FileIdOf(copy), 0);
  CfiRow row;
  CHECK(cfi != nullptr && cfi->FindRow(self.function_vaddr, &row));
  LookUpEverywhere(*cfi, self.bytes.size());
  CHECK(cache.memory_bytes() < self.bytes.size() + (1 << 20));
  CHECK(VmSizeKb() < vm_before + 64 * 1024);
  unlink(copy.c_str());
}

// Twelve copies of the program's file in a cache that holds four of them: it drops what it used
// least before each unwind, and what it hands out after a drop is whole.
void TestManyFilesStayWithinTheCachesBound(const Self& self, const std::string& dir) {
  ElfCache probe;
  CHECK(probe.Cfi(self.path, FileIdOf(self.path), 0) != nullptr);
  const uint64_t one_file = probe.memory_bytes();
  ElfCache cache(4 * one_file);
  const uint64_t first_generation = cache.generation();
  std::vector<std::string> copies;
  for (int i = 0; i < 12; ++i) {
    copies.push_back(dir + "/copy" + std::to_string(i) + ".so");
    WriteFile(copies.back(), self.bytes);
    cache.BeginUnwind();
    CHECK(cache.memory_bytes() <= 4 * one_file);
    const CfiTable* cfi = cache.Cfi(copies.back(), FileIdOf(copies.back()), 0);
    CfiRow row;
    CHECK(cfi != nullptr && cfi->FindRow(self.function_vaddr, &row));
    CHECK(cache.memory_bytes() <= 5 * one_file);
  }
  CHECK(cache.generation() != first_generation);
  for (const std::string& copy : copies) unlink(copy.c_str());
}

// An unwind through two files when it may read one file's tables and a half: the second file's
// are put off (the unwind says so) and read by the next unwind, whole. Likewise past the load
// deadline (the worker's share of time): the first file of each unwind is read, the rest put off.
void TestTablesPastAnUnwindsReadsArePutOff(const Self& self, const std::string& dir) {
  droidheap::ReadAllowance unbounded(UINT64_MAX);
  CHECK(droidheap::CfiFile::Open(self.path, FileIdOf(self.path),
                                 {0, self.bytes.size(), ""}, &unbounded) != nullptr);
  const uint64_t one_file = UINT64_MAX - unbounded.remaining();  // what its tables read
  ElfCache cache(ElfCache::kDefaultMaxBytes, one_file * 3 / 2);
  const std::string first = dir + "/first.so", second = dir + "/second.so";
  WriteFile(first, self.bytes);
  WriteFile(second, self.bytes);
  cache.BeginUnwind();
  CHECK(cache.Cfi(first, FileIdOf(first), 0) != nullptr && !cache.deferred());
  CHECK(cache.Cfi(second, FileIdOf(second), 0) == nullptr && cache.deferred());
  const uint64_t generation = cache.generation();
  cache.BeginUnwind();
  CHECK(cache.generation() != generation && !cache.deferred());
  const CfiTable* cfi = cache.Cfi(second, FileIdOf(second), 0);
  CfiRow row;
  CHECK(cfi != nullptr && cfi->FindRow(self.function_vaddr, &row));
  // After its first file, an unwind past the load deadline puts the rest off.
  const std::string third = dir + "/third.so", fourth = dir + "/fourth.so";
  WriteFile(third, self.bytes);
  WriteFile(fourth, self.bytes);
  cache.SetLoadDeadline(0);
  cache.BeginUnwind();
  CHECK(cache.Cfi(third, FileIdOf(third), 0) != nullptr && !cache.deferred());
  CHECK(cache.Cfi(fourth, FileIdOf(fourth), 0) == nullptr && cache.deferred());
  cache.BeginUnwind();
  CHECK(cache.Cfi(fourth, FileIdOf(fourth), 0) != nullptr);
  for (const std::string& path : {first, second, third, fourth}) unlink(path.c_str());
}

}  // namespace

int main() {
  const Self self = ReadSelf();
  char dir[] = "/tmp/hostile_tables_test.XXXXXX";
  CHECK(mkdtemp(dir) != nullptr);
  TestAFileTruncatedAfterItWasReadCrashesNothing(self, dir);
  TestASparseSectionCostsNothing(self, dir);
  TestManyFilesStayWithinTheCachesBound(self, dir);
  TestTablesPastAnUnwindsReadsArePutOff(self, dir);
  rmdir(dir);
  printf("hostile_tables_test: ok\n");
  return 0;
}

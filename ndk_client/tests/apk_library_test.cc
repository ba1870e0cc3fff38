// A library mapped from inside an APK, as Android's linker maps an app's JNI library: the daemon
// finds the ELF file in the zip entry that holds the mapping's offset, and reads its build id,
// load bias and unwind tables there exactly as from the file on its own (this test binary, stored
// in a zip the test writes). An entry the linker could not have mapped (compressed, not
// page-aligned, past the end of the file, a directory that lies) leaves the mapping named for the
// APK, with one line for the log, and nothing is read outside the entry.
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/test_util.h"
#include "unwinder/dwarf_cfi.h"
#include "unwinder/process_maps.h"
#include "unwinder/zip_entry.h"

using droidheap::CfiRow;
using droidheap::ElfCache;
using droidheap::ElfInfo;
using droidheap::MapEntry;
using droidheap::MappedFileId;
using droidheap::ProcessMaps;

namespace {

constexpr char kLibraryEntry[] = "lib/abi/libself.so";
constexpr uint64_t kBase = 0x40000000;  // where the test's "linker" maps the library

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xffff);
  Put16(out, v >> 16);
}

struct ZipMember {
  std::string name;
  std::string data;
  uint16_t method = 0;     // 0 stored, 8 deflated (the bytes are not, which nothing reads)
  uint64_t align = 4096;   // of its data, as zipalign -p leaves a library; 1 for none
  uint32_t claimed_size = 0;  // when not 0, the size the directory claims
};

// A zip as zipalign leaves an APK: each member's local header, padded in its extra field so that
// its data starts on `align`, then the central directory and its end record. Returns where each
// member's data starts.
std::vector<uint64_t> WriteZip(const std::string& path, const std::vector<ZipMember>& members,
                               uint32_t claimed_directory_offset = 0) {
  std::string file, directory;
  std::vector<uint64_t> data_offsets;
  for (const ZipMember& m : members) {
    const uint64_t header = file.size();
    uint64_t padding = 0;
    const uint64_t unpadded = header + 30 + m.name.size();
    if (m.align > 1) padding = (m.align - unpadded % m.align) % m.align;
    const uint32_t size = m.claimed_size ? m.claimed_size : static_cast<uint32_t>(m.data.size());
    Put32(&file, 0x04034b50);
    Put16(&file, 10);
    Put16(&file, 0);
    Put16(&file, m.method);
    Put32(&file, 0);  // time, date
    Put32(&file, 0);  // crc (unchecked)
    Put32(&file, size);
    Put32(&file, size);
    Put16(&file, static_cast<uint32_t>(m.name.size()));
    Put16(&file, static_cast<uint32_t>(padding));
    file += m.name;
    file.append(padding, '\0');
    data_offsets.push_back(file.size());
    file += m.data;

    Put32(&directory, 0x02014b50);
    Put16(&directory, 10);
    Put16(&directory, 10);
    Put16(&directory, 0);
    Put16(&directory, m.method);
    Put32(&directory, 0);
    Put32(&directory, 0);
    Put32(&directory, size);
    Put32(&directory, size);
    Put16(&directory, static_cast<uint32_t>(m.name.size()));
    Put16(&directory, 0);  // extra
    Put16(&directory, 0);  // comment
    Put16(&directory, 0);  // disk
    Put16(&directory, 0);  // internal attributes
    Put32(&directory, 0);  // external attributes
    Put32(&directory, static_cast<uint32_t>(header));
    directory += m.name;
  }
  const uint64_t directory_offset = file.size();
  file += directory;
  Put32(&file, 0x06054b50);
  Put32(&file, 0);
  Put16(&file, static_cast<uint32_t>(members.size()));
  Put16(&file, static_cast<uint32_t>(members.size()));
  Put32(&file, static_cast<uint32_t>(directory.size()));
  Put32(&file, claimed_directory_offset ? claimed_directory_offset
                                        : static_cast<uint32_t>(directory_offset));
  Put16(&file, 0);
  FILE* f = fopen(path.c_str(), "wb");
  CHECK(f != nullptr && fwrite(file.data(), 1, file.size(), f) == file.size());
  fclose(f);
  return data_offsets;
}

// The maps lines a linker writes for `elf`'s PT_LOADs when it maps the ELF file found at
// `elf_offset` of the file at `path`.
std::string MapsOf(const std::string& path, const ElfInfo& elf, uint64_t elf_offset) {
  const MappedFileId id = FileIdOf(path);
  std::string text;
  for (const ElfInfo::Segment& s : elf.loads) {
    const uint64_t start = kBase + (s.vaddr & ~0xfffull);
    const uint64_t end = (kBase + s.vaddr + s.file_size + 0xfff) & ~0xfffull;
    char line[512];
    snprintf(line, sizeof(line), "%llx-%llx %s %08llx %x:%x %llu %s\n",
             static_cast<unsigned long long>(start), static_cast<unsigned long long>(end),
             s.executable ? "r-xp" : "r--p",
             static_cast<unsigned long long>(elf_offset + (s.offset & ~0xfffull)), id.dev_major,
             id.dev_minor, static_cast<unsigned long long>(id.inode), path.c_str());
    text += line;
  }
  return text;
}

struct Fixture {
  std::string self_path;
  std::string self_bytes;
  ElfInfo self_elf;
  uint64_t function_vaddr = 0;  // of a function of this program, in its ELF address space
  CfiRow self_row;
};

Fixture MakeFixture() {
  Fixture f;
  f.self_path = ProgramPath();
  f.self_bytes = ReadWholeFile(f.self_path.c_str());
  ElfCache cache;
  f.self_elf = cache.Get(f.self_path, FileIdOf(f.self_path), 0);
  CHECK(f.self_elf.valid && !f.self_elf.build_id.empty() && f.self_elf.location.offset == 0);
  f.function_vaddr = reinterpret_cast<uintptr_t>(&MakeFixture) -
      LoadBiasOf(reinterpret_cast<uintptr_t>(&MakeFixture)) + 4;
  const droidheap::CfiTable* cfi = cache.Cfi(f.self_path, FileIdOf(f.self_path), 0);
  CHECK(cfi != nullptr && cfi->FindRow(f.function_vaddr, &f.self_row));
  return f;
}

const MapEntry* FindFunction(const Fixture& f, ProcessMaps* maps, ElfCache* cache) {
  return maps->Find(kBase + f.function_vaddr, cache);
}

void TestALibraryStoredInAnApkIsReadThere(const Fixture& f, const std::string& apk) {
  const std::vector<uint64_t> offsets =
      WriteZip(apk, {{"AndroidManifest.xml", "<manifest/>", 0, 1},
                     {"classes.dex", std::string(5000, 'x'), 8, 1},
                     {kLibraryEntry, f.self_bytes},
                     {"resources.arsc", std::string(100, 'r'), 0, 4}});
  const uint64_t elf_offset = offsets[2];
  CHECK(elf_offset % 4096 == 0);
  ElfCache cache;
  ProcessMaps maps;
  maps.Parse(MapsOf(apk, f.self_elf, elf_offset));
  const MapEntry* e = FindFunction(f, &maps, &cache);
  CHECK(e != nullptr && e->executable);
  CHECK(e->build_id == f.self_elf.build_id);
  CHECK(e->elf.offset == elf_offset && e->elf.size == f.self_bytes.size());
  CHECK(e->elf.entry == kLibraryEntry);
  CHECK(e->RelPc(kBase + f.function_vaddr) == f.function_vaddr);
  CfiRow row;
  CHECK(e->cfi != nullptr && e->cfi->FindRow(f.function_vaddr, &row));
  CHECK(row.pc_begin == f.self_row.pc_begin && row.pc_end == f.self_row.pc_end);
  CHECK(row.cfa.reg == f.self_row.cfa.reg && row.cfa.offset == f.self_row.cfa.offset);
  CHECK(cache.TakeProblems().empty());
  // Every mapping of the library leads to one entry of the cache: the same tables.
  for (const MapEntry& other : maps.entries()) {
    const ElfInfo& info = cache.Get(other.path, other.file, other.offset);
    CHECK(info.valid && info.location.offset == elf_offset);
  }
}

// Each way an entry cannot be what a linker mapped: the mapping stays the APK's (no build id, no
// tables), one problem is told, and the answer is the same the second time, told once.
void ExpectRefused(const Fixture& f, const std::string& apk, uint64_t elf_offset,
                   const char* problem) {
  ElfCache cache;
  ProcessMaps maps;
  maps.Parse(MapsOf(apk, f.self_elf, elf_offset));
  const MapEntry* e = FindFunction(f, &maps, &cache);
  CHECK(e != nullptr && e->build_id.empty() && e->cfi == nullptr && e->elf.entry.empty());
  std::vector<std::string> problems = cache.TakeProblems();
  if (problems.size() != 1 || problems[0].find(problem) == std::string::npos) {
    fprintf(stderr, "expected one problem with \"%s\", got %zu: %s\n", problem, problems.size(),
            problems.empty() ? "" : problems[0].c_str());
    CHECK(false);
  }
  maps.Parse(MapsOf(apk, f.self_elf, elf_offset));
  FindFunction(f, &maps, &cache);
  CHECK(cache.TakeProblems().empty());
}

void TestEntriesNoLinkerMapsAreRefused(const Fixture& f, const std::string& apk) {
  std::vector<uint64_t> offsets = WriteZip(apk, {{kLibraryEntry, f.self_bytes, 8}});
  ExpectRefused(f, apk, offsets[0], "compressed");

  offsets = WriteZip(apk, {{"a", "x", 0, 1}, {kLibraryEntry, f.self_bytes, 0, 2}});
  CHECK(offsets[1] % 4096 != 0);
  ExpectRefused(f, apk, (offsets[1] + 0xfff) & ~0xfffull, "not page-aligned");

  // The directory claims more bytes than the file has.
  offsets = WriteZip(apk, {{kLibraryEntry, f.self_bytes, 0, 4096,
                            static_cast<uint32_t>(f.self_bytes.size() * 4)}});
  ExpectRefused(f, apk, offsets[0], "past the end");

  // A directory said to lie past the end of the file.
  offsets = WriteZip(apk, {{kLibraryEntry, f.self_bytes}}, 0x7fffffff);
  ExpectRefused(f, apk, offsets[0], "truncated zip");

  // A stored entry that holds no ELF file.
  offsets = WriteZip(apk, {{kLibraryEntry, std::string(f.self_bytes.size(), 'z')}});
  ExpectRefused(f, apk, offsets[0], "no ELF file");
}

// An ELF file that claims more than its entry holds (section headers, segments past its end):
// read as far as the entry goes, never further.
void TestAnElfCutShortInItsEntryIsReadOnlyThere(const Fixture& f, const std::string& apk) {
  const std::string head = f.self_bytes.substr(0, 8192);
  const std::vector<uint64_t> offsets =
      WriteZip(apk, {{kLibraryEntry, head}, {"after", f.self_bytes}});
  ElfCache cache;
  const ElfInfo& info = cache.Get(apk, FileIdOf(apk), offsets[0]);
  CHECK(info.valid && info.location.size == head.size());
  const droidheap::CfiTable* cfi = cache.Cfi(apk, FileIdOf(apk), offsets[0]);
  CfiRow row;
  CHECK(cfi == nullptr || !cfi->FindRow(f.function_vaddr, &row) ||
        f.function_vaddr < head.size());
}

uint64_t BytesReadSoFar() {
  const std::string io = ReadWholeFile("/proc/self/io");
  const size_t at = io.find("rchar:");
  CHECK(at != std::string::npos);
  return strtoull(io.c_str() + at + 6, nullptr, 10);
}

// A process maps one APK with a large directory at 250 offsets, none of them a library's: the
// directory is read once, not once per offset, and its problem is told once.
void TestAnApkMappedAtManyOffsetsIsReadOnce(const std::string& apk) {
  std::vector<ZipMember> members;
  for (int i = 0; i < 20000; ++i) {
    members.push_back({"res/" + std::string(80, 'n') + std::to_string(i), "x", 0, 1});
  }
  WriteZip(apk, members);
  const uint64_t directory_size = 20000 * (46 + 85);
  ElfCache cache;
  const uint64_t before = BytesReadSoFar();
  for (uint64_t page = 0; page < 250; ++page) {
    CHECK(!cache.Get(apk, FileIdOf(apk), page * 4096).valid);
  }
  CHECK(BytesReadSoFar() - before < 2 * directory_size);
  CHECK(cache.TakeProblems().size() == 1);
}

// A file that is neither ELF nor zip is nothing to tell of.
void TestOtherFilesAreNoProblem(const std::string& path) {
  FILE* out = fopen(path.c_str(), "wb");
  CHECK(out != nullptr);
  fputs("just text, longer than an end-of-directory record\n", out);
  fclose(out);
  ElfCache cache;
  CHECK(!cache.Get(path, FileIdOf(path), 0).valid);
  CHECK(cache.TakeProblems().empty());
}

}  // namespace

int main() {
  const Fixture fixture = MakeFixture();
  char dir[] = "/tmp/apk_library_test.XXXXXX";
  CHECK(mkdtemp(dir) != nullptr);
  const std::string apk = std::string(dir) + "/base.apk";
  TestALibraryStoredInAnApkIsReadThere(fixture, apk);
  TestEntriesNoLinkerMapsAreRefused(fixture, apk);
  TestAnElfCutShortInItsEntryIsReadOnlyThere(fixture, apk);
  TestAnApkMappedAtManyOffsetsIsReadOnce(apk);
  TestOtherFilesAreNoProblem(std::string(dir) + "/notes.txt");
  unlink(apk.c_str());
  unlink((std::string(dir) + "/notes.txt").c_str());
  rmdir(dir);
  printf("apk_library_test: ok\n");
  return 0;
}

// ProcessMaps::Find: the entry holding a pc, or nothing, whether the answer comes from the search
// or from the page it was last found in; reading the maps again forgets every page.
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "tests/test_util.h"
#include "unwinder/process_maps.h"

using droidheap::ElfCache;
using droidheap::MapEntry;
using droidheap::ProcessMaps;

namespace {

const char kMaps[] =
    "1000-3000 r-xp 00000000 00:00 0 [anon:code]\n"
    "5000-5800 rw-p 00000000 00:00 0 [anon:first half]\n"
    "5800-6000 rw-p 00000000 00:00 0 [anon:second half]\n";

const char* PathAt(ProcessMaps* maps, ElfCache* cache, uint64_t pc) {
  const MapEntry* e = maps->Find(pc, cache);
  return e == nullptr ? nullptr : e->path.c_str();
}

bool Is(const char* found, const char* expected) {
  return found != nullptr && std::string(found) == expected;
}

void TestEveryPcFindsItsEntryTwice() {
  ElfCache cache;
  ProcessMaps maps;
  maps.Parse(kMaps);
  for (int round = 0; round < 2; ++round) {  // the second round answers from the pages
    CHECK(Is(PathAt(&maps, &cache, 0x1000), "[anon:code]"));
    CHECK(Is(PathAt(&maps, &cache, 0x2fff), "[anon:code]"));
    CHECK(PathAt(&maps, &cache, 0x3000) == nullptr);
    CHECK(PathAt(&maps, &cache, 0x0fff) == nullptr);
    // Two entries in one page (never in /proc, but the text is the client's): each pc its own.
    CHECK(Is(PathAt(&maps, &cache, 0x5010), "[anon:first half]"));
    CHECK(Is(PathAt(&maps, &cache, 0x5810), "[anon:second half]"));
    CHECK(Is(PathAt(&maps, &cache, 0x5020), "[anon:first half]"));
  }
}

void TestReadingTheMapsAgainForgetsThePages() {
  ElfCache cache;
  ProcessMaps maps;
  maps.Parse(kMaps);
  CHECK(Is(PathAt(&maps, &cache, 0x2000), "[anon:code]"));
  maps.Parse(
      "0-1000 r-xp 00000000 00:00 0 [anon:low]\n"
      "2000-4000 r-xp 00000000 00:00 0 [anon:new]\n");
  CHECK(Is(PathAt(&maps, &cache, 0x2000), "[anon:new]"));
  CHECK(PathAt(&maps, &cache, 0x1000) == nullptr);
}

// Under qemu-user the guest's own maps lack the mappings the kernel merged; the host's view fills
// those gaps with its file mappings, and nothing else.
void TestTheHostViewFillsOnlyTheGuestsGaps() {
  ElfCache cache;
  ProcessMaps maps;
  maps.Parse(
      "1000-2000 r-xp 00000000 00:00 0 [anon:code]\n"
      "5000-6000 rw-p 00005000 fe:00 7 /system/lib64/libc.so\n");
  CHECK(PathAt(&maps, &cache, 0x3000) == nullptr);
  maps.AddMissing(
      "1000-2000 r--p 00000000 00:00 0 [anon:host code]\n"
      "3000-5000 r--p 00000000 fe:00 7 /system/lib64/libc.so\n"
      "5000-6000 rw-p 00005000 fe:00 7 /system/lib64/libc.so\n"
      "5800-7000 r--p 00000000 fe:00 8 /overlapping\n"
      "7000-8000 rw-p 00000000 00:00 0 \n"
      "9000-a000 r--p 00000000 fe:00 9 /usr/bin/qemu-aarch64\n");
  const MapEntry* merged = maps.Find(0x4000, &cache);
  CHECK(merged != nullptr && merged->path == "/system/lib64/libc.so" && !merged->permissions_known);
  CHECK(Is(PathAt(&maps, &cache, 0x1800), "[anon:code]"));
  CHECK(maps.Find(0x1800, &cache)->permissions_known);
  CHECK(Is(PathAt(&maps, &cache, 0x5800), "/system/lib64/libc.so"));
  CHECK(PathAt(&maps, &cache, 0x6800) == nullptr);  // overlapped a known entry: not taken
  CHECK(PathAt(&maps, &cache, 0x7800) == nullptr);  // not a file
  CHECK(Is(PathAt(&maps, &cache, 0x9800), "/usr/bin/qemu-aarch64"));
  CHECK(maps.entries().size() == 4);
}

// qemu-user shows a 32-bit guest's library, its read-only segment and code merged by the kernel,
// as one r--p mapping: the file's code in it still gets its unwind tables.
void TestCodeInAMappingShownReadOnlyGetsItsUnwindTables() {
  // The program's own file, stat'ed by its path: under qemu-user (this test on bionic) only
  // readlink of /proc/self/exe is the guest's, a stat of it is qemu's own binary.
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  CHECK(length > 0);
  path[length] = '\0';
  struct stat st;
  CHECK(stat(path, &st) == 0);
  char maps_text[4200 + 100];
  snprintf(maps_text, sizeof(maps_text), "10000000-%llx r--p 00000000 %x:%x %llu %s\n",
           0x10000000ull + ((static_cast<unsigned long long>(st.st_size) + 0xfff) & ~0xfffull),
           major(st.st_dev), minor(st.st_dev), static_cast<unsigned long long>(st.st_ino), path);
  ElfCache cache;
  ProcessMaps maps;
  maps.Parse(maps_text);
  const MapEntry* merged = maps.Find(0x10000000, &cache);
  CHECK(merged != nullptr && !merged->executable && merged->cfi != nullptr);
  // Data alone gets none.
  maps.Parse("10000000-10001000 rw-p 00000000 00:00 0 [anon:data]\n");
  CHECK(maps.Find(0x10000000, &cache)->cfi == nullptr);
}

}  // namespace

int main() {
  TestEveryPcFindsItsEntryTwice();
  TestReadingTheMapsAgainForgetsThePages();
  TestTheHostViewFillsOnlyTheGuestsGaps();
  TestCodeInAMappingShownReadOnlyGetsItsUnwindTables();
  printf("ok\n");
  return 0;
}

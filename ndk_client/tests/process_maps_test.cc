// ProcessMaps::Find: the entry holding a pc, or nothing, whether the answer comes from the search
// or from the page it was last found in; reading the maps again forgets every page.
#include <stdio.h>

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

}  // namespace

int main() {
  TestEveryPcFindsItsEntryTwice();
  TestReadingTheMapsAgainForgetsThePages();
  printf("ok\n");
  return 0;
}

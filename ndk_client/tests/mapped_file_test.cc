// OpenMappedFile: what a profiled process may put at the path its maps name. The mapped file itself
// opens, as a maps line identifies it (the daemon's real case: this binary's own text mapping);
// a FIFO is refused without blocking, a symbolic link is not followed, and a file of another inode
// or device is not the mapped one.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "tests/test_util.h"
#include "unwinder/mapped_file.h"
#include "unwinder/process_maps.h"

using droidheap::MapEntry;
using droidheap::MappedFileId;
using droidheap::OpenMappedFile;
using droidheap::ProcessMaps;

namespace {

MappedFileId IdOf(const std::string& path) {
  struct stat st;
  CHECK(lstat(path.c_str(), &st) == 0);
  MappedFileId id;
  id.dev_major = major(st.st_dev);
  id.dev_minor = minor(st.st_dev);
  id.inode = st.st_ino;
  return id;
}

bool Opens(const std::string& path, const MappedFileId& id, uint64_t* size = nullptr) {
  int fd = OpenMappedFile(path, id, size);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

void TestTheMappedFileOpensAsItsMapsLineNamesIt() {
  ProcessMaps maps;
  const int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  CHECK(maps.Reload(maps_fd));
  close(maps_fd);
  const uintptr_t own_code = reinterpret_cast<uintptr_t>(&Opens);
  const MapEntry* text = nullptr;
  for (const MapEntry& e : maps.entries()) {
    if (e.start <= own_code && own_code < e.end) text = &e;
  }
  CHECK(text != nullptr && text->file.inode != 0);
  struct stat st;
  CHECK(stat(text->path.c_str(), &st) == 0);
  uint64_t size = 0;
  CHECK(Opens(text->path, text->file, &size));
  CHECK(size == static_cast<uint64_t>(st.st_size));
}

void TestARegularFileOfAnotherIdentityIsRefused(const std::string& dir) {
  const std::string path = dir + "/lib.so";
  FILE* f = fopen(path.c_str(), "w");
  CHECK(f != nullptr && fputs("\177ELF", f) >= 0 && fclose(f) == 0);
  MappedFileId id = IdOf(path);
  uint64_t size = 0;
  CHECK(Opens(path, id, &size) && size == 4);
  MappedFileId other_inode = id;
  ++other_inode.inode;
  CHECK(!Opens(path, other_inode));
  MappedFileId other_device = id;
  ++other_device.dev_minor;
  CHECK(!Opens(path, other_device));
  unlink(path.c_str());
}

void TestASymbolicLinkIsNotFollowed(const std::string& dir) {
  const std::string target = dir + "/target.so", link = dir + "/link.so";
  FILE* f = fopen(target.c_str(), "w");
  CHECK(f != nullptr && fclose(f) == 0);
  CHECK(symlink(target.c_str(), link.c_str()) == 0);
  // Even naming the target's identity, as if the link's path were the mapped one.
  CHECK(!Opens(link, IdOf(target)));
  unlink(link.c_str());
  unlink(target.c_str());
}

void TestAFifoIsRefusedWithoutBlocking(const std::string& dir) {
  const std::string fifo = dir + "/fifo.so";
  CHECK(mkfifo(fifo.c_str(), 0600) == 0);
  // A blocking open() would wait for a writer that never comes: SIGALRM's default action then
  // ends the test.
  alarm(5);
  CHECK(!Opens(fifo, IdOf(fifo)));
  alarm(0);
  unlink(fifo.c_str());
}

}  // namespace

int main() {
  char dir[] = "/tmp/mapped_file_test.XXXXXX";
  CHECK(mkdtemp(dir) != nullptr);
  TestTheMappedFileOpensAsItsMapsLineNamesIt();
  TestARegularFileOfAnotherIdentityIsRefused(dir);
  TestASymbolicLinkIsNotFollowed(dir);
  TestAFifoIsRefusedWithoutBlocking(dir);
  rmdir(dir);
  printf("mapped_file_test: ok\n");
  return 0;
}

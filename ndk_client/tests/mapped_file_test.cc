// OpenMappedFile: what a profiled process may put at the path its maps name. The mapped file itself
// opens, as a maps line identifies it (the daemon's real case: this binary's own text mapping);
// a FIFO is refused without blocking, a symbolic link is not followed at any component, a FIFO
// reached through a directory swapped for a link is not even opened (its blocked writer sleeps on),
// a path not canonical is refused, and a file of another inode or device is not the mapped one.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
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

void TestALinkAsADirectoryOfThePathIsNotFollowed(const std::string& dir) {
  const std::string real = dir + "/real", link = dir + "/link";
  CHECK(mkdir(real.c_str(), 0700) == 0);
  FILE* f = fopen((real + "/lib.so").c_str(), "w");
  CHECK(f != nullptr && fclose(f) == 0);
  CHECK(symlink("real", link.c_str()) == 0);
  const MappedFileId id = IdOf(real + "/lib.so");
  CHECK(Opens(real + "/lib.so", id));
  // The same file, its identity right, but reached through a link: the link could as well have
  // led anywhere by the time the daemon looked.
  CHECK(!Opens(link + "/lib.so", id));
  unlink(link.c_str());
  unlink((real + "/lib.so").c_str());
  rmdir(real.c_str());
}

// The state letter of process `pid` in /proc/PID/stat ('S' while it sleeps, in open() here).
char ProcessState(pid_t pid) {
  FILE* f = fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  char state = '?';
  if (f != nullptr) {
    if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = '?';
    fclose(f);
  }
  return state;
}

void SleepMs(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&t, nullptr);
}

void TestAFifoBehindASwappedDirectoryIsNotOpened(const std::string& dir) {
  // The process mapped DIR/lib/lib.so, then made DIR/lib a link to a directory holding a FIFO of
  // the same name, with a writer blocked in open(): opening the FIFO, even O_NONBLOCK and at once
  // closed, would wake it. The id is the FIFO's own, as if the process had mapped it.
  const std::string elsewhere = dir + "/elsewhere", lib = dir + "/lib";
  const std::string fifo = elsewhere + "/lib.so";
  CHECK(mkdir(elsewhere.c_str(), 0700) == 0 && mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(symlink("elsewhere", lib.c_str()) == 0);
  int ready[2];
  CHECK(pipe(ready) == 0);
  const pid_t writer = fork();
  CHECK(writer >= 0);
  if (writer == 0) {
    close(ready[0]);
    CHECK(write(ready[1], "o", 1) == 1);
    open(fifo.c_str(), O_WRONLY);
    _exit(0);  // woken
  }
  close(ready[1]);
  char byte;
  CHECK(read(ready[0], &byte, 1) == 1);
  close(ready[0]);
  // Past its write, the writer sleeps only in open().
  for (int i = 0; i < 500 && ProcessState(writer) != 'S'; ++i) SleepMs(10);
  CHECK(ProcessState(writer) == 'S');
  SleepMs(50);
  CHECK(!Opens(lib + "/lib.so", IdOf(fifo)));
  SleepMs(200);
  int status;
  CHECK(waitpid(writer, &status, WNOHANG) == 0);  // still blocked in open()
  kill(writer, SIGKILL);
  CHECK(waitpid(writer, &status, 0) == writer);
  unlink(lib.c_str());
  unlink(fifo.c_str());
  rmdir(elsewhere.c_str());
}

void TestAPathNotAsTheKernelPrintsItIsRefused(const std::string& dir) {
  const std::string sub = dir + "/sub", path = dir + "/lib.so";
  CHECK(mkdir(sub.c_str(), 0700) == 0);
  FILE* f = fopen(path.c_str(), "w");
  CHECK(f != nullptr && fclose(f) == 0);
  const MappedFileId id = IdOf(path);
  CHECK(Opens(path, id));
  // Each names the very file, its identity right.
  CHECK(!Opens(sub + "/../lib.so", id));
  CHECK(!Opens(dir + "/./lib.so", id));
  CHECK(!Opens(dir + "//lib.so", id));
  CHECK(chdir(dir.c_str()) == 0);
  CHECK(!Opens("lib.so", id));
  CHECK(chdir("/") == 0);
  unlink(path.c_str());
  rmdir(sub.c_str());
}

}  // namespace

int main() {
  char temp[] = "/tmp/mapped_file_test.XXXXXX";
  CHECK(mkdtemp(temp) != nullptr);
  // As a maps line names it: canonical, whatever links lead to the temporary directory.
  char* real_temp = realpath(temp, nullptr);
  CHECK(real_temp != nullptr);
  const std::string dir = real_temp;
  free(real_temp);
  TestTheMappedFileOpensAsItsMapsLineNamesIt();
  TestARegularFileOfAnotherIdentityIsRefused(dir);
  TestASymbolicLinkIsNotFollowed(dir);
  TestAFifoIsRefusedWithoutBlocking(dir);
  TestALinkAsADirectoryOfThePathIsNotFollowed(dir);
  TestAFifoBehindASwappedDirectoryIsNotOpened(dir);
  TestAPathNotAsTheKernelPrintsItIsRefused(dir);
  rmdir(dir.c_str());
  printf("mapped_file_test: ok\n");
  return 0;
}

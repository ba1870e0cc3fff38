#include "daemon/output_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

namespace droidheap {
namespace {

// O_PATH: a directory on the way may grant its search permission alone (a phone's /data/local is
// root's, 0751, on the shell user's way to /data/local/tmp).
constexpr int kDirectoryFlags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// The directory `dir` (absolute, or relative to the working directory), reached without following
// a link; -1 with errno set otherwise.
int OpenDirectory(const std::string& dir) {
  // The first component is opened by its absolute path, not as a name in "/": qemu-user (the arm64
  // emulator device) resolves "/" itself to its sysroot, and an absolute path there only when the
  // sysroot has it.
  size_t begin = dir.find_first_not_of('/');
  int fd;
  if (dir.empty() || dir[0] != '/') {
    fd = open(".", kDirectoryFlags);
  } else if (begin == std::string::npos) {
    fd = open("/", kDirectoryFlags);
  } else {
    size_t end = dir.find('/', begin);
    fd = open(dir.substr(0, end).c_str(), kDirectoryFlags);
    begin = end;
  }
  while (fd >= 0 && begin < dir.size()) {
    begin = dir.find_first_not_of('/', begin);
    if (begin == std::string::npos) break;
    size_t end = dir.find('/', begin);
    if (end == std::string::npos) end = dir.size();
    const int next = openat(fd, dir.substr(begin, end - begin).c_str(), kDirectoryFlags);
    const int saved = errno;
    close(fd);
    errno = saved;
    fd = next;
    begin = end;
  }
  return fd;
}

}  // namespace

int OpenOutputFile(const std::string& path, int flags) {
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty()) {
    errno = EISDIR;
    return -1;
  }
  const int dir_fd = OpenDirectory(slash == std::string::npos ? "" : path.substr(0, slash + 1));
  if (dir_fd < 0) return -1;
  const int fd = openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | flags,
                        0644);
  const int saved = errno;
  // The new entry must reach the disk too. Some file systems refuse fsync on directories, and a
  // directory may not be readable; the data itself is synced by its writer.
  if (fd >= 0) {
    const int sync_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sync_fd >= 0) {
      fsync(sync_fd);
      close(sync_fd);
    }
  }
  close(dir_fd);
  errno = saved;
  return fd;
}

}  // namespace droidheap

#include "unwinder/mapped_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace droidheap {
namespace {

// File systems whose stat() device is not the one the maps show: overlayfs (containers; Android's
// `adb remount`) stats as the overlay but maps the layer's file, btrfs stats a subvolume's own
// anonymous device but maps the file system's. There the inode (and S_ISREG, the lookup that
// follows no link) must do.
constexpr unsigned long kOverlayfsMagic = 0x794c7630;
constexpr unsigned long kBtrfsMagic = 0x9123683e;

bool SameDevice(int fd, dev_t dev, const MappedFileId& id) {
  if (major(dev) == id.dev_major && minor(dev) == id.dev_minor) return true;
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return false;
  const unsigned long type = static_cast<unsigned long>(fs.f_type) & 0xffffffffu;
  return type == kOverlayfsMagic || type == kBtrfsMagic;
}

// The root the kernel printed the maps path from. Not "/": qemu-user (the arm64 emulator device)
// resolves an absolute path to its sysroot (-L) when the sysroot has it, "/" itself included.
constexpr char kRoot[] = "/proc/self/root";

// An O_PATH fd of what `path` names, each of its components looked up as a name in the directory
// before it, none followed when it is a symbolic link: a link as a directory fails the lookup
// (O_DIRECTORY), and one at the last component is what the fd refers to (O_PATH|O_NOFOLLOW), to be
// refused as not a regular file. O_PATH opens nothing (no FIFO's writer wakes, no driver runs) and
// needs no permission on the directories beyond search. -1 unless `path` is canonical as the
// kernel prints a maps path: absolute, no empty, "." or ".." component.
int OpenPathWithoutLinks(const std::string& path) {
  if (path.empty() || path[0] != '/') return -1;
  int fd = open(kRoot, O_PATH | O_DIRECTORY | O_CLOEXEC);
  size_t begin = 1;
  while (fd >= 0) {
    size_t end = path.find('/', begin);
    const bool last = end == std::string::npos;
    if (last) end = path.size();
    const std::string name = path.substr(begin, end - begin);
    int next = -1;
    if (!name.empty() && name != "." && name != "..") {
      next = openat(fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC | (last ? 0 : O_DIRECTORY));
    }
    close(fd);
    fd = next;
    if (last) break;
    begin = end + 1;
  }
  return fd;
}

// Whether `st`, the fstat of `fd`, is a regular file with the identity of `id`. The maps line
// prints the device as major:minor of the kernel's number, which glibc's and bionic's
// major()/minor() decode from st_dev alike.
bool IsTheMappedFile(int fd, const struct stat& st, const MappedFileId& id) {
  return S_ISREG(st.st_mode) && st.st_ino == id.inode && SameDevice(fd, st.st_dev, id);
}

}  // namespace

int OpenMappedFile(const std::string& path, const MappedFileId& id, uint64_t* size) {
  // The process may change what lies at `path` at any time; nothing it names is opened until it is
  // known to be the mapped file. fstat and fstatfs work on an O_PATH fd (Linux 3.6 and 3.12).
  const int path_fd = OpenPathWithoutLinks(path);
  if (path_fd < 0) return -1;
  struct stat st;
  if (fstat(path_fd, &st) != 0 || !IsTheMappedFile(path_fd, st, id)) {
    close(path_fd);
    return -1;
  }
  // Opened for reading through the O_PATH fd, not by the path again: the inode just checked,
  // whatever the path names by now. O_NONBLOCK and O_NOCTTY cost nothing on a regular file and
  // keep the open harmless should anything else ever get here; the check after it is as cheap.
  char proc_path[32];
  snprintf(proc_path, sizeof(proc_path), "/proc/self/fd/%d", path_fd);
  const int fd = open(proc_path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  close(path_fd);
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !IsTheMappedFile(fd, st, id)) {
    close(fd);
    return -1;
  }
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

bool ReadFileAt(int fd, uint64_t offset, void* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, static_cast<char*>(out) + done, size - done,
                            static_cast<off_t>(offset + done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace droidheap

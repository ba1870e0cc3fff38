#include "unwinder/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace droidheap {
namespace {

// File systems whose stat() device is not the one the maps show: overlayfs (containers; Android's
// `adb remount`) stats as the overlay but maps the layer's file, btrfs stats a subvolume's own
// anonymous device but maps the file system's. There the inode (and S_ISREG, O_NOFOLLOW) must do.
constexpr unsigned long kOverlayfsMagic = 0x794c7630;
constexpr unsigned long kBtrfsMagic = 0x9123683e;

bool SameDevice(int fd, dev_t dev, const MappedFileId& id) {
  if (major(dev) == id.dev_major && minor(dev) == id.dev_minor) return true;
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return false;
  const unsigned long type = static_cast<unsigned long>(fs.f_type) & 0xffffffffu;
  return type == kOverlayfsMagic || type == kBtrfsMagic;
}

}  // namespace

int OpenMappedFile(const std::string& path, const MappedFileId& id, uint64_t* size) {
  // O_NONBLOCK: a FIFO opens at once, to be refused below, instead of waiting for a writer; it
  // changes nothing for reading a regular file. O_NOFOLLOW: a link at the last component fails
  // with ELOOP. O_NOCTTY: a terminal there never becomes the daemon's.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  // The maps line prints the device as major:minor of the kernel's number, which glibc's and
  // bionic's major()/minor() decode from st_dev alike. A link in a directory component of the
  // path is followed, but then leads to the mapped file itself or is refused here.
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != id.inode ||
      !SameDevice(fd, st.st_dev, id)) {
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

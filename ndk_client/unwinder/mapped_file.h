// Opening a file that a profiled process maps, by the path its maps give. The process chooses what
// lies at that path and may change it at any time, the directories on the way included: a deleted
// file's path reads "PATH (deleted)", a name the process can give anything, and a directory of the
// path may be a symbolic link by the time the daemon looks. Opening what lies there would itself
// act: a FIFO's blocked writer wakes, a device node's driver runs (the daemon is root on a phone),
// a plain open() of a FIFO blocks the unwinding worker; and a link or another file would lend the
// mapping someone else's symbols, or let a root daemon read what the app cannot. So the path is
// looked up component by component from the root, following no symbolic link anywhere in it, as a
// location only (O_PATH), and refused unless canonical as the kernel prints it (absolute, no empty,
// "." or ".." component). Only when what it names is a regular file with the device and inode of
// the maps line is that very inode opened for reading (through /proc/self/fd). Anything else is
// refused, which costs that mapping its symbols only. Needs /proc. Stateless; any thread.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <tuple>

namespace droidheap {

// A mapped file's identity as its maps line gives it ("major:minor inode"; qemu-user shows the
// host's numbers, as the daemon's fstat sees them under it too).
struct MappedFileId {
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;

  bool operator<(const MappedFileId& o) const {
    return std::tie(dev_major, dev_minor, inode) < std::tie(o.dev_major, o.dev_minor, o.inode);
  }
};

// Where an ELF file lies in the file a process maps: all of it, or one entry of an APK
// (zip_entry.h).
struct ElfLocation {
  uint64_t offset = 0;  // of the ELF file's first byte
  uint64_t size = 0;
  std::string entry;    // the APK's entry ("lib/arm64-v8a/libfoo.so"); empty for a whole file
};

// A read-only fd (O_CLOEXEC) of the regular file at `path` when it is the file `id` names, reached
// through no symbolic link, with its size in `*size` (when not null); -1 otherwise. Opens nothing
// else that the path names (a FIFO, a device), so never blocks on it nor sets it off.
int OpenMappedFile(const std::string& path, const MappedFileId& id, uint64_t* size);

// Reads exactly `size` bytes at `offset` of `fd`; false on an error or the end of the file.
bool ReadFileAt(int fd, uint64_t offset, void* out, size_t size);

}  // namespace droidheap

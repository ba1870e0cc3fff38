// Opening a file that a profiled process maps, by the path its maps give. The process chooses what
// lies at that path and may change it at any time: a deleted file's path reads "PATH (deleted)",
// a name the process can give anything. A FIFO there would block a plain open() (and the
// unwinding worker with it) until a writer comes; a symbolic link or another file would lend the
// mapping someone else's symbols, or let a root daemon read what the app cannot. So the file is
// opened without blocking and without following a link at its last component, and kept only when
// it is a regular file and the very one mapped: the device and inode of its maps line. Anything
// else is refused, which costs that mapping its symbols only. Stateless; any thread.
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

// A read-only fd (O_CLOEXEC) of the regular file at `path` when it is the file `id` names, with its
// size in `*size` (when not null); -1 otherwise. Never blocks on what the path names (a FIFO, a
// device).
int OpenMappedFile(const std::string& path, const MappedFileId& id, uint64_t* size);

// Reads exactly `size` bytes at `offset` of `fd`; false on an error or the end of the file.
bool ReadFileAt(int fd, uint64_t offset, void* out, size_t size);

}  // namespace droidheap

#include "unwinder/file_reads.h"

#include <errno.h>
#include <unistd.h>

#include "common/platform.h"

namespace droidheap {

bool HasHole(int fd, uint64_t offset, uint64_t size) {
  // SEEK_HOLE gives the first hole at or after `offset`; the end of the file counts as one. File
  // systems without holes answer with the end of the file, an old kernel with EINVAL.
  const off_t hole = lseek(fd, static_cast<off_t>(offset), SEEK_HOLE);
  if (hole < 0) return errno != EINVAL;
  return static_cast<uint64_t>(hole) < offset + size;
}

bool ElfBytes::Read(uint64_t offset, void* out, uint64_t size) const {
  return offset <= location.size && size <= location.size - offset &&
         ReadFileAt(fd, location.offset + offset, out, static_cast<size_t>(size));
}

bool ElfBytes::ReadTable(uint64_t offset, uint64_t size, ReadAllowance* allowance,
                         std::vector<uint8_t>* out) const {
  if (offset > location.size || size > location.size - offset || !allowance->Take(size) ||
      HasHole(fd, location.offset + offset, size)) {
    return false;
  }
  out->resize(static_cast<size_t>(size));
  out->shrink_to_fit();
  return Read(offset, out->data(), size);
}

}  // namespace droidheap

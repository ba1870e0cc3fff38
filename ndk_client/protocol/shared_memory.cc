#include "protocol/shared_memory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/platform.h"

namespace droidheap {
namespace {

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;

}  // namespace

int CreateSealedMemory(const char* name, size_t size) {
  // The system call itself: bionic has memfd_create only from API 30.
  int fd = static_cast<int>(syscall(__NR_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, kRequiredSeals | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool IsSealedMemory(int fd, uint64_t expected_size) {
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != expected_size) return false;
  int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & kRequiredSeals) == kRequiredSeals;
}

}  // namespace droidheap

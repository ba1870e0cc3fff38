#include "unwinder/stack_memory.h"

#include <string.h>
#include <unistd.h>

#include "common/platform.h"

namespace droidheap {

bool StackMemory::ReadWordFromProcess(uint64_t address, uint32_t size, uint64_t* value) const {
  if (process_ != nullptr) return process_->ReadWord(address, size, value);
  if (size != 4 && size != 8) return false;
  *value = 0;
  if (mem_fd_ < 0 || address > static_cast<uint64_t>(INT64_MAX)) return false;
  return pread(mem_fd_, value, size, static_cast<off_t>(address)) == static_cast<ssize_t>(size);
}

uint64_t NormalizePc(const RegisterLayout& layout, uint64_t pc) {
  switch (layout.abi) {
    case Abi::kArm64:
      // User-space addresses fit in 48 bits; PAC and top-byte tags live above.
      return pc & ((uint64_t{1} << 48) - 1);
    case Abi::kArm:
      return pc & 0xfffffffeu;
    default:
      return layout.Wrap(pc);
  }
}

}  // namespace droidheap

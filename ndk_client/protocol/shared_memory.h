// Sealed shared memory objects, as the daemon creates them and the client checks them: a memfd of
// fixed size that neither side can shrink or grow (a peer that truncated it under the other's
// mapping would make the next access SIGBUS).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace droidheap {

// Daemon side: a new memfd of `size` bytes, sealed against shrinking and growing. -1 on error.
int CreateSealedMemory(const char* name, size_t size);

// Client side: whether `fd` is `expected_size` bytes long and sealed so that it stays so.
bool IsSealedMemory(int fd, uint64_t expected_size);

}  // namespace droidheap

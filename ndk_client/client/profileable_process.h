// Whether the client can profile the process that loads it.
#pragma once

namespace droidheap {

// False when nothing the client would record could be right: the malloc the program calls is
// another module's than the one whose code holds `loader_code` (bionic's libc, or droidheap's
// interposing library), or AddressSanitizer checks the process's memory accesses. True when it
// cannot tell.
bool ProfileableProcess(const void* loader_code);

}  // namespace droidheap

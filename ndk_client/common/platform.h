// The few differences between bionic and glibc, and between 32- and 64-bit builds, that the native
// code meets, in one place.
#pragma once

#include <sys/types.h>

// Thread-locals of the code loaded into the profiled process. glibc allocates a dlopened library's
// dynamic TLS block with malloc, on first touch -- re-entering our own hooks -- so the static
// (initial-exec) model is used there; bionic refuses that model in dlopened libraries and its ELF
// TLS (API 29 and later) never allocates through malloc. Below API 29 the NDK emulates TLS with
// malloc: CMakeLists.txt refuses to build for it.
#if defined(__BIONIC__)
#define DROIDHEAP_TLS thread_local
#else
#define DROIDHEAP_TLS thread_local __attribute__((tls_model("initial-exec")))
#endif

// File offsets are 64-bit in every build: the daemon reads /proc/<pid>/mem at the target's
// addresses, above 2 GiB in 32-bit processes too, and maps shared memory by offset. CMakeLists.txt
// defines _FILE_OFFSET_BITS=64, which glibc honours and bionic does for every call used here from
// API 21 (scripts/build_ndk.sh builds for 26).
static_assert(sizeof(off_t) == 8, "build with -D_FILE_OFFSET_BITS=64 (CMakeLists.txt does)");

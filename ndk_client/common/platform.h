// The few differences between bionic and glibc that the in-process code meets, in one place.
#pragma once

// Thread-locals of the code loaded into the profiled process. glibc allocates a dlopened library's
// dynamic TLS block with malloc, on first touch -- re-entering our own hooks -- so the static
// (initial-exec) model is used there; bionic refuses that model in dlopened libraries and never
// allocates TLS through malloc.
#if defined(__BIONIC__)
#define DROIDHEAP_TLS thread_local
#else
#define DROIDHEAP_TLS thread_local __attribute__((tls_model("initial-exec")))
#endif

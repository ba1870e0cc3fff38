// Loading the heap profiling client into this process, the two ways bionic does it:
//  1. at start-up, from the library's constructor (`LoadClient()`), when the library's own rule
//     says so (properties on the emulated device, an environment variable in the preload library);
//  2. at run time: the profiling signal (36) sent with sigqueue (SI_QUEUE) and value 0 installs an
//     ephemeral hook; the next malloc restores the previous table, then starts a thread that loads
//     the client.
// The client's heapprofd_* entry points fill the dispatch table that is swapped in once
// heapprofd_initialize succeeds.
//
// The location is set once, by the library's constructor, before either route can run; the
// routes then run on the constructor's thread or on the loading thread, one at a time.
#pragma once

#include <stddef.h>

namespace droidheap {

// Where the client library is, and the socket it connects to. False when a path is too long.
bool SetClientLocation(const char* library_path, const char* socket_path);

// Loads the client (once) and swaps its table in; false when it could not be loaded or connect.
bool LoadClient();

// Handles the profiling signal from now on. Signals with another value go to the handler that was
// installed before (bionic's, for the other profilers it serves).
void InstallProfilingSignalRoute();

// The program name bionic matches profiling requests against: basename of argv[0], cut at '@'.
bool ProgramName(char* out, size_t out_size);

}  // namespace droidheap

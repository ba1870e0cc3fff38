// Creating the daemon's output files (the trace, the stack log) in a directory others may own: on a
// phone a root daemon writes into /data/local/tmp/droidheap/traces, a directory of the shell user,
// who could plant a symbolic link at the file's name, or in place of any directory on the way, to
// redirect root's writes. So no link is followed anywhere in the path: each directory is opened
// from the one before it with O_NOFOLLOW, and the file in the last one. droidheap names a path
// without links (the emulator device resolves its root). Stateless; any thread.
#pragma once

#include <string>

namespace droidheap {

// Opens `path` with O_WRONLY|O_CREAT|O_NOFOLLOW|O_CLOEXEC and `flags` (O_EXCL, O_APPEND) added,
// mode 0644, and fsyncs its directory, so that a new file's entry reaches the disk too. -1 with
// errno set on any error, a symbolic link in the path among them (ELOOP or ENOTDIR).
int OpenOutputFile(const std::string& path, int flags);

}  // namespace droidheap

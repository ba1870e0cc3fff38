// Whether a descriptor a process passed is what it says: its own /proc/<pid>/maps, mem or
// pagemap (the same file, device and inode, as the daemon finds under that pid), and not a file,
// pipe or device of its choosing that would hand the daemon endless or blocking reads. Asked of
// the client's handshake and of the copy a snapshot forks.
#pragma once

namespace droidheap {

// Under qemu-user, which hands a guest a one-time copy of its maps on a memfd instead of procfs's
// file, a memfd passes as the maps when the daemon's own maps come the same way (it then runs
// under qemu too: the emulator device, never a phone).
bool MapsAreProcessOwn(int maps_fd, int pid);
// Whether this daemon's own /proc/self/maps is a copy rather than procfs's file: it runs under
// qemu-user, and so do the clients it serves (the emulator's arm64 device, the Android test
// device). Asked once.
bool MapsAreEmulated();
bool MemIsProcessOwn(int mem_fd, int pid);
bool PagemapIsProcessOwn(int pagemap_fd, int pid);

}  // namespace droidheap

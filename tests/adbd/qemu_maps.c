/* Gives a guest program run by qemu-user a phone's /proc/self/maps: one line per segment of each
 * file it maps (the test adbd's --android device). Named in the device's /etc/ld.so.preload, so
 * loaded by glibc's loader into qemu (and the device's other host programs, unaffected).
 *
 * qemu maps guest code without PROT_EXEC on the host, so a library's read-only segment and its
 * code, adjacent in memory and in the file, have the same host permissions and the kernel merges
 * them into one VMA. qemu 7.2 builds the guest's own /proc/self/maps from the host's VMAs, and
 * leaves such a merged one out (or shows it read-only), so a program's code, its libc's and its
 * linker's vanish from its own view: Google's heapprofd, which unwinds with the maps its client
 * passes, finds no mapping for any pc. The kernel merges only VMAs of equal flags: marking every
 * other private file mapping VM_DONTDUMP (madvise; it only keeps the range out of core dumps)
 * keeps each segment of a file its own VMA, as a phone's kernel, which sees the real permissions,
 * keeps them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

typedef void *(*MmapFunction)(void *, size_t, int, int, int, off_t);

static unsigned long file_mappings;

void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  static MmapFunction next;
  if (next == NULL) next = (MmapFunction)dlsym(RTLD_NEXT, "mmap");
  void *mapped = next(addr, length, prot, flags, fd, offset);
  if (mapped != MAP_FAILED && fd >= 0 && !(flags & (MAP_ANONYMOUS | MAP_SHARED)) &&
      __atomic_fetch_add(&file_mappings, 1, __ATOMIC_RELAXED) % 2 == 1) {
    madvise(mapped, length, MADV_DONTDUMP);
  }
  return mapped;
}

/* The same function under its large-file name, which a program built with 64-bit offsets calls. */
void *mmap64(void *addr, size_t length, int prot, int flags, int fd, off_t offset)
    __attribute__((alias("mmap")));

/* Gives a guest program run by qemu-user a phone's /proc/PID/cmdline (the test adbd's --android
 * device). Named in the device's /etc/ld.so.preload: only glibc's loader reads that file, so only
 * qemu (a host program) loads this; Android's bionic programs never do.
 *
 * Under binfmt_misc's P flag the kernel starts `INTERP /full/path/prog ARGV0 ARGV1...`, and what
 * other processes read as the guest's command line (toybox ps, droidheap's `-n NAME`, heapprofd's
 * cmdline matching) starts with qemu's own two words. Moving the kernel's start of the command
 * line (mm->arg_start) to ARGV0 hides them; the strings themselves stay where they are, so qemu,
 * which keeps pointers to them and answers the guest's own /proc/self/cmdline from them, is
 * unaffected.
 *
 * Failures are silent: this runs inside every qemu on the device, which must start regardless.
 */
/* syscall() is not POSIX, O_CLOEXEC not C99's: a build may ask for a strict -std. */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BINFMT_P_SUFFIX "-binfmt-P"

/* /proc/self/stat's fields (proc(5) numbers them from 1), as far as env_end; 0 where not a number.
 * Returns 0 when all were read. */
static int read_stat(unsigned long long *fields, int count) {
  char buf[2048];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* comm (field 2) may hold spaces and parentheses: the fields after it follow its last ')'. */
  char *p = strrchr(buf, ')');
  if (p == NULL) return -1;
  for (int i = 3; i < count; i++) {
    p = strchr(p, ' ');
    if (p == NULL) return -1;
    fields[i] = strtoull(++p, NULL, 10);
  }
  return 0;
}

/* glibc passes main's arguments to constructors; the loader's argv points into the kernel's
 * argument area, the very bytes /proc/PID/cmdline shows. */
__attribute__((constructor)) static void start_cmdline_at_guest_argv0(int argc, char **argv) {
  if (argc < 3 || argv == NULL || argv[0] == NULL || argv[2] == NULL) return;
  size_t len = strlen(argv[0]);
  size_t suffix_len = sizeof(BINFMT_P_SUFFIX) - 1;
  if (len < suffix_len || strcmp(argv[0] + len - suffix_len, BINFMT_P_SUFFIX) != 0) return;

  unsigned long long stat[52] = {0};
  if (read_stat(stat, 52) != 0) return;
  unsigned long arg_start = (unsigned long)stat[48], arg_end = (unsigned long)stat[49];
  unsigned long guest_argv0 = (unsigned long)argv[2];
  /* The kernel checks only that the new start is a user address below arg_end: be sure it is
   * one of the strings it shows, or the command line would start in the middle of nowhere. */
  if (guest_argv0 <= arg_start || guest_argv0 >= arg_end) return;

  /* PR_SET_MM_ARG_START needs CAP_SYS_RESOURCE, which a container's root may lack; PR_SET_MM_MAP
   * does not (while it leaves exe_fd alone), but sets every field at once, so the others are
   * written back as they are. The kernel takes them as given, not checked against the mappings:
   * brk must be the current one (the brk syscall with 0 reports it; stat has only start_brk). */
  struct prctl_mm_map map = {
      .start_code = stat[26],
      .end_code = stat[27],
      .start_stack = stat[28],
      .start_data = stat[45],
      .end_data = stat[46],
      .start_brk = stat[47],
      .brk = (unsigned long)syscall(SYS_brk, 0),
      .arg_start = guest_argv0,
      .arg_end = arg_end,
      .env_start = stat[50],
      .env_end = stat[51],
      .auxv = NULL,
      .auxv_size = 0,
      .exe_fd = (unsigned int)-1,
  };
  prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long)&map, sizeof(map), 0);
}

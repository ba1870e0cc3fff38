/* Copies the file `from` to a new file `to` (0755); 1 on success. For the test programs that map a
 * copy of their own code (replaced_library.c, truncated_library.c). */
#pragma once
#include <fcntl.h>
#include <unistd.h>

static int copy_file(const char* from, const char* to) {
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0755);
  char buf[65536];
  ssize_t n = 0;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0) {
    if (write(out, buf, (size_t)n) != n) n = -1;
  }
  int ok = in >= 0 && out >= 0 && n == 0;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return ok;
}

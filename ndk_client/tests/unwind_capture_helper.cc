// The process cross_abi_unwind_test unwinds from outside, built for another ABI than the test
// (the 32-bit build's helper, unwound by the 64-bit build's test, as a 64-bit droidheapd unwinds a
// 32-bit app). It captures stacks the way the client does, writes their count and then each
// capture (stack_capture.h) to stdout, and waits for stdin to close, so that its maps and memory
// stay readable until the test is done.
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "tests/stack_capture.h"

using namespace droidheap::stack_capture;

int main() {
  Capture captures[3];
  Recurse(40, &captures[0]);
  ThroughQsort(&captures[1]);
  ThroughStdFunction(&captures[2]);
  const uint32_t count = 3;
  if (!WriteAll(STDOUT_FILENO, &count, sizeof(count))) return 1;
  for (const Capture& capture : captures) {
    if (!WriteCapture(STDOUT_FILENO, capture)) return 1;
  }
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  return 0;
}

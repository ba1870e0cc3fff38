/* Functions whose ARM EHABI entries need different unwind instructions, built for armeabi-v7a as
 * an app's code is (tests/unit/test_arm_exidx.py): a leaf, callee-saved registers, VFP registers,
 * a large frame, a frame addressed through r7 (alloca), nested calls from main. */
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile int sink;

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int many_registers(int a, int b, int c, int d) {
  int v[10];
  for (int i = 0; i < 10; ++i) v[i] = leaf(a + i) ^ b;
  int s = 0;
  for (int i = 0; i < 10; ++i) s += v[i] * (c + d + i) + leaf(v[(i + 3) % 10]);
  return s;
}

__attribute__((noinline)) double floating(double x, int n) {
  double a = x, b = x * 0.5, c = x + 1.0, d = x - 2.0;
  for (int i = 0; i < n; ++i) {
    a = a * b + leaf(i);
    b = b + c * d;
    c = c - a / (d + 3.0);
    d = d * 0.75 + many_registers(i, n, i, n);
  }
  return a + b + c + d;
}

__attribute__((noinline)) int large_frame(int n) {
  char buffer[5000];
  memset(buffer, n, sizeof(buffer));
  sink = buffer[n % 5000];
  return many_registers(buffer[17], n, n, 2) + (int)floating(n, 3);
}

__attribute__((noinline)) int dynamic_frame(int n) {
  char* p = alloca((size_t)n + 16);
  memset(p, 1, (size_t)n + 16);
  return large_frame(p[n] + n);
}

int main(int argc, char** argv) {
  (void)argv;
  void* leak = malloc(100);
  sink = dynamic_frame(argc + 40);
  printf("%d %p\n", sink, leak);
  return 0;
}

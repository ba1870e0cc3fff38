/* An app's JNI library, for the test zygote (zygote.c), which loads it from an APK as Android's
 * linker loads an app's native code: `dlopen("APK!/lib/ABI/libjnidemo.so")`.
 *
 * Java_com_example_app_MainActivity_allocate is what a Java method `native void allocate(int,
 * int)` of com.example.app.MainActivity would call: it allocates `count` blocks of `size` bytes,
 * all kept, and is itself the frame that calls malloc (the top frame of each sample).
 */
#include <stdlib.h>

static void* volatile g_sink;

__attribute__((visibility("default"), noinline)) void Java_com_example_app_MainActivity_allocate(
    void* env, void* thiz, int count, int size) {
  (void)env;
  (void)thiz;
  for (int i = 0; i < count; i++) g_sink = malloc((size_t)size);
  __asm__ volatile("" ::: "memory");  /* no tail call: this frame stays on the stack */
}

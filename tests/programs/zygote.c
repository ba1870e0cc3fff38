/* A stand-in for Android's zygote, for the Android test devices: it forks "apps" as zygote forks
 * an app, and each loads its JNI library from an APK as Android's linker loads an app's code.
 *
 *   zygote APK ABI [--wait-file PATH] [--delay MS] [--linger MS] NAME[:unprofileable]...
 *
 * zygote names itself "zygote64" (its argv rewritten, as /proc/PID/cmdline then shows, and
 * PR_SET_NAME). For each NAME, --delay ms apart, it forks a child that, in zygote's order:
 * calls android_mallopt(M_SET_ZYGOTE_CHILD) (until the next step bionic ignores the profiling
 * signal); takes its name, written over its argv as zygote does and given to PR_SET_NAME; unless
 * :unprofileable, calls android_mallopt(M_INIT_ZYGOTE_CHILD_PROFILING) (where bionic reads
 * heapprofd.enable.NAME and may load the profiler); then dlopen()s APK!/lib/ABI/libjnidemo.so and
 * prints "app NAME pid=N waiting". It allocates a little every 10 ms (so that an attaching
 * profiler's hook fires) until PATH exists (at once without --wait-file), then calls the library's
 * Java_com_example_app_MainActivity_allocate(4096 blocks of 1024 bytes, kept: 4 MiB), frees 4096
 * blocks of its own, prints "app NAME pid=N done", allocates a little every 10 ms for --linger ms
 * and exits. zygote exits
 * when all its children have.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MAX_APPS 8

enum { M_INIT_ZYGOTE_CHILD_PROFILING = 1, M_SET_ZYGOTE_CHILD = 4 };  /* bionic's malloc.h */

typedef bool (*android_mallopt_fn)(int opcode, void* arg, size_t arg_size);
typedef void (*allocate_fn)(void* env, void* thiz, int count, int size);

static void* volatile g_sink;
static char* g_argv_start;  /* the process's argv strings, which /proc/PID/cmdline reads */
static size_t g_argv_size;

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

NOINLINE static void heartbeat(void) {
  void* p = malloc(16);
  g_sink = p;
  free(p);
}

/* As zygote's setArgv0: the name over the argv strings, the rest zeroed; then the thread's name. */
static void set_process_name(const char* name) {
  memset(g_argv_start, 0, g_argv_size);
  strncpy(g_argv_start, name, g_argv_size - 1);
  prctl(PR_SET_NAME, name, 0, 0, 0);
}

static android_mallopt_fn android_mallopt_of_libc(void) {
  android_mallopt_fn fn = (android_mallopt_fn)dlsym(RTLD_DEFAULT, "android_mallopt");
  if (fn == NULL) {
    fprintf(stderr, "zygote: no android_mallopt in this libc\n");
    exit(2);
  }
  return fn;
}

NOINLINE static int run_app(const char* apk, const char* abi, const char* name, bool profileable,
                            const char* wait_file, int linger_ms) {
  android_mallopt_fn android_mallopt = android_mallopt_of_libc();
  if (!android_mallopt(M_SET_ZYGOTE_CHILD, NULL, 0)) return 3;
  set_process_name(name);
  if (profileable && !android_mallopt(M_INIT_ZYGOTE_CHILD_PROFILING, NULL, 0)) return 3;
  char library[4096];
  snprintf(library, sizeof(library), "%s!/lib/%s/libjnidemo.so", apk, abi);
  void* handle = dlopen(library, RTLD_NOW);
  allocate_fn allocate =
      handle ? (allocate_fn)dlsym(handle, "Java_com_example_app_MainActivity_allocate") : NULL;
  if (allocate == NULL) {
    fprintf(stderr, "app %s: cannot load %s: %s\n", name, library, dlerror());
    return 4;
  }
  printf("app %s pid=%d waiting\n", name, getpid());
  fflush(stdout);
  while (wait_file != NULL && access(wait_file, F_OK) != 0) {
    heartbeat();
    sleep_ms(10);
  }
  allocate(NULL, NULL, 4096, 1024);
  /* Frees after it, as an app's threads make: Google's heapprofd books a client's allocations
   * only up to its latest batch of frees, which its client sends a thousand or so at a time. */
  for (int i = 0; i < 4096; i++) heartbeat();
  printf("app %s pid=%d done\n", name, getpid());
  fflush(stdout);
  for (int waited = 0; waited < linger_ms; waited += 10) {
    heartbeat();
    sleep_ms(10);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: zygote APK ABI [--wait-file PATH] [--delay MS] [--linger MS] "
            "NAME[:unprofileable]...\n");
    return 2;
  }
  /* Everything the children need, copied before the argv strings are written over. */
  const char* apk = strdup(argv[1]);
  const char* abi = strdup(argv[2]);
  const char* wait_file = NULL;
  int delay_ms = 0, linger_ms = 0, apps = 0;
  char* names[MAX_APPS];
  bool profileable[MAX_APPS];
  for (int i = 3; i < argc; i++) {
    if (strcmp(argv[i], "--wait-file") == 0 && i + 1 < argc) {
      wait_file = strdup(argv[++i]);
    } else if (strcmp(argv[i], "--delay") == 0 && i + 1 < argc) {
      delay_ms = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--linger") == 0 && i + 1 < argc) {
      linger_ms = atoi(argv[++i]);
    } else if (apps < MAX_APPS) {
      names[apps] = strdup(argv[i]);
      char* suffix = strchr(names[apps], ':');
      profileable[apps] = !(suffix != NULL && strcmp(suffix, ":unprofileable") == 0);
      if (!profileable[apps]) *suffix = '\0';
      apps++;
    }
  }
  g_argv_start = argv[0];
  g_argv_size = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) + 1 - argv[0]);
  set_process_name("zygote64");
  printf("zygote pid=%d\n", getpid());
  fflush(stdout);

  for (int i = 0; i < apps; i++) {
    if (i > 0) sleep_ms(delay_ms);
    pid_t pid = fork();
    if (pid == 0) _exit(run_app(apk, abi, names[i], profileable[i], wait_file, linger_ms));
    if (pid < 0) perror("fork");
  }
  int status, failures = 0;
  while (wait(&status) > 0) failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return failures == 0 ? 0 : 1;
}

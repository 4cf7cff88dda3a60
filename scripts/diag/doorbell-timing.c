/* scripts/diag/doorbell-timing.c -- a diagnostic LD_PRELOAD shim (not part of
 * the build or the tests). It times every doorbell of an RDMA client on
 * soft-RoCE: rxe's user library rings the kernel with a 32-byte write() on
 * the uverbs file per ibv_post_send (and the kernel then does the whole
 * transfer inline), so the time inside those writes is the kernel's work per
 * post, and the time between two of them is the process's own (building the
 * next request, writing it into the send queue, polling completions). It
 * prints both, in TSC cycles per doorbell, when the process exits. It times
 * perftest's tools and ours alike, which is the point.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/doorbell-timing.so scripts/diag/doorbell-timing.c -ldl
 *   LD_PRELOAD=/tmp/doorbell-timing.so ib_write_bw -d rxe0 -x 0 -s 64 -n 80000 127.0.0.1
 *
 * Two experiments, off unless set in the environment:
 *   DOORBELL_SLEEPER=1  start one extra thread that only sleeps, so that a
 *                       single-threaded tool (perftest) shares its file table
 *                       like a multi-threaded one (the kernel then counts a
 *                       reference on the file in every write(): fdget's slow path)
 *   DOORBELL_TOUCH=N    read one byte of each of N pages of a private buffer
 *                       before every doorbell (a larger user working set)
 *
 * Used for issue 20 (docs/performance.md, "The 64 B gap").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <stdint.h>
#include <unistd.h>
#include <x86intrin.h>
static ssize_t (*real_write)(int, const void *, size_t);
static __thread uint64_t last_end;
static uint64_t g_n, g_in, g_between;
__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "doorbell-timing: pid %d doorbells %lu in-write %.0f cyc/op between %.0f cyc/op\n", getpid(),
          (unsigned long)g_n, g_n ? (double)g_in / g_n : 0, g_n ? (double)g_between / g_n : 0);
}
static long touch_pages;
static volatile char *touch_buf;
static void *sleeper(void *arg) {
  (void)arg;
  for (;;) sleep(1000);
  return NULL;
}
__attribute__((constructor)) static void setup(void) {
  const char *s = getenv("DOORBELL_SLEEPER");
  if (s && *s == '1') {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_detach(t);
  }
  const char *t = getenv("DOORBELL_TOUCH");
  if (t) {
    touch_pages = atol(t);
    if (touch_pages > 0) touch_buf = calloc((size_t)touch_pages, 4096);
    if (!touch_buf) touch_pages = 0;
  }
}
ssize_t write(int fd, const void *buf, size_t len) {
  if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
  if (len != 24 && len != 32) return real_write(fd, buf, len);
  for (long i = 0; i < touch_pages; i++) (void)touch_buf[i * 4096];
  uint64_t t0 = __rdtsc();
  ssize_t r = real_write(fd, buf, len);
  uint64_t t1 = __rdtsc();
  if (last_end && t0 - last_end < 100000000ULL) { __atomic_add_fetch(&g_between, t0 - last_end, __ATOMIC_RELAXED); }
  __atomic_add_fetch(&g_in, t1 - t0, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_n, 1, __ATOMIC_RELAXED);
  last_end = t1;
  return r;
}

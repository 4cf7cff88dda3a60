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
 * Used for issue 20 (docs/performance.md, "write_bw's last 1-3 %: placed, not yet fixed").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <unistd.h>
#include <x86intrin.h>
static ssize_t (*real_write)(int, const void *, size_t);
static __thread uint64_t last_end, n, in_k, between, maxin;
static uint64_t g_n, g_in, g_between;
__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "doorbell-timing: pid %d doorbells %lu in-write %.0f cyc/op between %.0f cyc/op\n", getpid(),
          (unsigned long)g_n, g_n ? (double)g_in / g_n : 0, g_n ? (double)g_between / g_n : 0);
}
ssize_t write(int fd, const void *buf, size_t len) {
  if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
  if (len != 24 && len != 32) return real_write(fd, buf, len);
  uint64_t t0 = __rdtsc();
  ssize_t r = real_write(fd, buf, len);
  uint64_t t1 = __rdtsc();
  if (last_end && t0 - last_end < 100000000ULL) { __atomic_add_fetch(&g_between, t0 - last_end, __ATOMIC_RELAXED); }
  __atomic_add_fetch(&g_in, t1 - t0, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_n, 1, __ATOMIC_RELAXED);
  last_end = t1;
  return r;
}

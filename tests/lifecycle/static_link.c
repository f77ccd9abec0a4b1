/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/* Linked with libcupool.a and nothing else of cupool's (no -ljemalloc): the static archive
 * takes its metadata from libc, so this must link, run, and pool a stream. Its own
 * constructor initialises cupool, which in a static executable runs before the constructors
 * of the archive's members (the layers' hook registrations): the configuration read then
 * must still be the one in use (CUPOOL_MAGAZINE_SIZE here). */
#include <cupool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void early(void)
{
    setenv("CUPOOL_MAGAZINE_SIZE", "4", 1);
    (void)cupool_init();
}

/* cupool_stats_print's text into buf. */
static const char *stats_text(char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fmemopen(buf, len - 1, "w");
    if (f) {
        cupool_stats_print(f);
        fclose(f);
    }
    return buf;
}

int main(void)
{
    CUresult (*get)(CUdevice *, int), (*retain)(CUcontext *, CUdevice), (*set)(CUcontext);
    CUdevice dev;
    CUcontext ctx;
    CUstream s, t;
    /* before any pool is used: the magazine capacity the pools will use */
    char first[512];
    if (!strstr(stats_text(first, sizeof first), "magazine 4")) {
        fprintf(stderr, "static_link: expected CUPOOL_MAGAZINE_SIZE=4 before use: %s\n", first);
        return 1;
    }
    if (cupool_init() != CUDA_SUCCESS ||
        cupool_driver_get_proc("cuDeviceGet", 2000, (void **)&get) != CUDA_SUCCESS ||
        cupool_driver_get_proc("cuDevicePrimaryCtxRetain", 7000, (void **)&retain) != CUDA_SUCCESS ||
        cupool_driver_get_proc("cuCtxSetCurrent", 4000, (void **)&set) != CUDA_SUCCESS ||
        get(&dev, 0) || retain(&ctx, dev) || set(ctx) ||
        cupool_stream_acquire(&s, 0, 0) || cupool_stream_release(s) ||
        cupool_stream_acquire(&t, 0, 0) || t != s || cupool_stream_release(t)) {
        fprintf(stderr, "static_link: %s\n", cupool_error_string());
        return 1;
    }
    char buf[512];
    if (!strstr(stats_text(buf, sizeof buf), "bytes from libc")) {
        fprintf(stderr, "static_link: expected libc metadata: %s\n", buf);
        return 1;
    }
    if (!strstr(buf, "magazine 4")) {
        fprintf(stderr, "static_link: expected CUPOOL_MAGAZINE_SIZE=4 in use: %s\n", buf);
        return 1;
    }
    printf("static archive: pooled stream reused, metadata from libc\n");
    return 0;
}

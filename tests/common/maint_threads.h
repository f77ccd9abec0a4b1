/* SPDX-License-Identifier: MIT */
/* Threads of this process named cupool-maint (cupool's maintenance thread), from /proc: for
 * the tests that check it runs, never runs, or is gone. Header-only: dlclose_child links
 * nothing of the test library. */
#ifndef CUPOOL_TEST_MAINT_THREADS_H
#define CUPOOL_TEST_MAINT_THREADS_H
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline int maint_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char path[300], name[64];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(name, sizeof name, f) && strncmp(name, "cupool-maint", 12) == 0)
            n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

/* Waits up to timeout_ms for the count of cupool-maint threads to reach 0; returns the last
 * count. A joined thread can still be listed for a moment: pthread_join returns when the kernel
 * clears the thread's tid, just before the kernel drops its /proc entry. A thread that outlives
 * an unload for real never leaves (it waits on a condition nobody signals, or crashes in
 * unmapped code), so a bounded wait still catches it. */
static inline int maint_threads_after_join(int timeout_ms)
{
    int n = maint_threads();
    for (int waited = 0; n != 0 && waited < timeout_ms; waited++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        n = maint_threads();
    }
    return n;
}

#endif

/* SPDX-License-Identifier: MIT */
/* Threads of this process named cupool-maint (cupool's maintenance thread), from /proc: for
 * the tests that check it runs, never runs, or is gone. Header-only: dlclose_child links
 * nothing of the test library. */
#ifndef CUPOOL_TEST_MAINT_THREADS_H
#define CUPOOL_TEST_MAINT_THREADS_H
#include <dirent.h>
#include <stdio.h>
#include <string.h>

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

#endif

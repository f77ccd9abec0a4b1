/* SPDX-License-Identifier: MIT */
/* A library opened with dlopen by preload_prog: its dlsym(RTLD_NEXT, ...) must still mean
 * "after this library" under libcupool_preload.so. */
#define _GNU_SOURCE
#include <dlfcn.h>

void *preload_next_malloc(void);
void *preload_next_malloc(void)
{
    return dlsym(RTLD_NEXT, "malloc");
}

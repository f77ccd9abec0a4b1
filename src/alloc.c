/* SPDX-License-Identifier: MIT */
/*
 * Metadata allocation. With jemalloc, cupool's own structures live in a private arena
 * (arenas.create), so they neither fragment nor are fragmented by the host's heap, and the
 * host's malloc stays whatever it was: libcupool.so only *links* libjemalloc.so.2, whose
 * malloc comes after libc's in the dynamic linker's search order (the executable's own
 * dependencies, libc among them, are searched before the dependencies of its libraries).
 * Only the shared library (built with -DPIC by libtool) uses jemalloc: a program linking
 * libcupool.a would have to list -ljemalloc itself, and that *could* place jemalloc's malloc
 * before libc's, so the static archive takes its metadata from libc.
 */
#include "internal.h"
#include "alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(CUPOOL_HAVE_JEMALLOC) && defined(PIC)
#define CUPOOL_USE_JEMALLOC 1
#include <jemalloc/jemalloc.h>
#endif

static size_t round_up(size_t size)
{
    return (size + CUPOOL_CACHELINE - 1) & ~(size_t)(CUPOOL_CACHELINE - 1);
}

#ifdef CUPOOL_USE_JEMALLOC
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_index;
static int arena_ok;
static char arena_name[40] = "libc";

static void arena_create(void)
{
    size_t sz = sizeof(arena_index);
    if (mallctl("arenas.create", &arena_index, &sz, NULL, 0) == 0) {
        arena_ok = 1;
        snprintf(arena_name, sizeof(arena_name), "jemalloc arena %u", arena_index);
    }
}

static int arena_flags(void)
{
    pthread_once(&arena_once, arena_create);
    return MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(CUPOOL_CACHELINE);
}
#endif

void *cupool__alloc(size_t size)
{
    if (size == 0)
        size = 1;
#ifdef CUPOOL_USE_JEMALLOC
    int flags = arena_flags();
    if (arena_ok)
        return mallocx(round_up(size), flags | MALLOCX_ZERO);
#endif
    void *p = aligned_alloc(CUPOOL_CACHELINE, round_up(size));
    if (p)
        memset(p, 0, round_up(size));
    return p;
}

void cupool__free(void *p, size_t size)
{
    if (!p)
        return;
#ifdef CUPOOL_USE_JEMALLOC
    if (arena_ok) {
        sdallocx(p, round_up(size ? size : 1), arena_flags());
        return;
    }
#endif
    (void)size;
    free(p);
}

const char *cupool__alloc_name(void)
{
#ifdef CUPOOL_USE_JEMALLOC
    pthread_once(&arena_once, arena_create);
    return arena_name;
#else
    return "libc";
#endif
}

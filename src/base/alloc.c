/* SPDX-License-Identifier: MIT */
/*
 * Metadata allocation. Where the process can host jemalloc, cupool's own structures live in
 * a private jemalloc arena (arenas.create), so they neither fragment nor are fragmented by the
 * host's heap; elsewhere they come from libc. jemalloc is never a link-time dependency: it is
 * opened with dlopen() at the first allocation (RTLD_LOCAL, so the host's malloc stays
 * whatever it was, and RTLD_NODELETE, so its thread-exit hooks outlive an unloaded cupool).
 * A link-time dependency would make libcupool.so itself impossible to load late: Debian's
 * libjemalloc.so.2 needs 2.6 KB of initial-exec TLS, more than the C library keeps spare
 * after startup, so Python's ctypes, a plugin host or a pybind11 module failed with "cannot
 * allocate memory in static TLS block". Now only jemalloc fails to load there (unless it is
 * in the process already, or GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 makes room),
 * and cupool takes libc; the statistics header names the allocator and why.
 * The static archive uses libc (a program linked with it may be static, without dlopen); so
 * does the preload (it brings nothing into the host process).
 *
 * Every block carries a one-cache-line header that links it into a list of live blocks, so
 * unloading the library (dlclose) can free everything it ever allocated, and the bytes held
 * are known exactly. Allocation is a slow-path event (records come in batches, magazines and
 * thread caches are reused), so the list's mutex is never on an acquire or release fast path.
 * Lock order: blocks_lock is the innermost lock of cupool (taken under any other, never
 * holding one).
 */
#define _GNU_SOURCE /* RTLD_NOLOAD, RTLD_NODELETE */
#include "base/internal.h"
#include "base/alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(CUPOOL_HAVE_JEMALLOC) && defined(PIC) && !defined(CUPOOL_BUILDING_PRELOAD)
#define CUPOOL_USE_JEMALLOC 1
#include <dlfcn.h>
/* only the flag macros: every function is looked up in the library opened at run time */
#include <jemalloc/jemalloc.h>
#endif

/* The header in front of every block; one cache line, so the block stays 64-byte aligned. */
struct block {
    struct block *prev, *next;
    size_t bytes; /* the whole allocation, header included */
    char pad[CUPOOL_CACHELINE - 2 * sizeof(void *) - sizeof(size_t)];
};
_Static_assert(sizeof(struct block) == CUPOOL_CACHELINE, "block header is one cache line");

/* The innermost lock (docs/design.md, "Locks"): taken under any other, takes none. */
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block blocks = {&blocks, &blocks, 0, {0}};
static _Atomic size_t bytes_held;

static size_t round_up(size_t size)
{
    return (size + CUPOOL_CACHELINE - 1) & ~(size_t)(CUPOOL_CACHELINE - 1);
}

#ifdef CUPOOL_USE_JEMALLOC
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_index;
static int arena_ok;
static char arena_name[200] = "libc";
static void *(*jem_mallocx)(size_t, int);
static void (*jem_sdallocx)(void *, size_t, int);
static int (*jem_mallctl)(const char *, void *, size_t *, void *, size_t);

/* Opens jemalloc where the process can host it and creates cupool's arena; else libc, and
 * arena_name says why. */
static void arena_create(void)
{
    dlerror();
    void *h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *why = dlerror();
        if (why && strstr(why, "static TLS"))
            /* the usual case, and no fault: a program started without jemalloc has no room
             * left for its TLS (README, "Building by hand") */
            snprintf(arena_name, sizeof(arena_name),
                     "libc (jemalloc not used: this process has no static TLS room left for "
                     "it; preload it or set GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096)");
        else
            snprintf(arena_name, sizeof(arena_name), "libc (libjemalloc.so.2 not opened: %.120s)",
                     why ? why : "unknown reason");
        return;
    }
    *(void **)&jem_mallocx = dlsym(h, "mallocx");
    *(void **)&jem_sdallocx = dlsym(h, "sdallocx");
    *(void **)&jem_mallctl = dlsym(h, "mallctl");
    size_t sz = sizeof(arena_index);
    if (!jem_mallocx || !jem_sdallocx || !jem_mallctl) {
        snprintf(arena_name, sizeof(arena_name), "libc (libjemalloc.so.2 lacks mallocx)");
        return;
    }
    if (jem_mallctl("arenas.create", &arena_index, &sz, NULL, 0) != 0) {
        snprintf(arena_name, sizeof(arena_name), "libc (jemalloc refused arenas.create)");
        return;
    }
    arena_ok = 1;
    snprintf(arena_name, sizeof(arena_name), "jemalloc arena %u", arena_index);
}

static int arena_flags(void)
{
    pthread_once(&arena_once, arena_create);
    return MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(CUPOOL_CACHELINE);
}
#endif

static void *raw_alloc(size_t bytes)
{
#ifdef CUPOOL_USE_JEMALLOC
    int flags = arena_flags();
    if (arena_ok)
        return jem_mallocx(bytes, flags | MALLOCX_ZERO);
#endif
    void *p = aligned_alloc(CUPOOL_CACHELINE, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

static void raw_free(void *p, size_t bytes)
{
#ifdef CUPOOL_USE_JEMALLOC
    if (arena_ok) {
        jem_sdallocx(p, bytes, arena_flags());
        return;
    }
#endif
    (void)bytes;
    free(p);
}

void *cupool__alloc(size_t size)
{
    size_t bytes = sizeof(struct block) + round_up(size ? size : 1);
    struct block *b = raw_alloc(bytes);
    if (!b)
        return NULL;
    b->bytes = bytes;
    pthread_mutex_lock(&blocks_lock);
    b->next = blocks.next;
    b->prev = &blocks;
    blocks.next->prev = b;
    blocks.next = b;
    pthread_mutex_unlock(&blocks_lock);
    atomic_fetch_add_explicit(&bytes_held, bytes, CUPOOL_RELAXED);
    return b + 1;
}

void cupool__free(void *p, size_t size)
{
    (void)size;
    if (!p)
        return;
    struct block *b = (struct block *)p - 1;
    pthread_mutex_lock(&blocks_lock);
    b->prev->next = b->next;
    b->next->prev = b->prev;
    pthread_mutex_unlock(&blocks_lock);
    atomic_fetch_sub_explicit(&bytes_held, b->bytes, CUPOOL_RELAXED);
    raw_free(b, b->bytes);
}

size_t cupool__alloc_bytes(void)
{
    return atomic_load_explicit(&bytes_held, CUPOOL_RELAXED);
}

void cupool__alloc_release_all(void)
{
    pthread_mutex_lock(&blocks_lock);
    struct block *b = blocks.next;
    while (b != &blocks) {
        struct block *next = b->next;
        raw_free(b, b->bytes);
        b = next;
    }
    blocks.next = blocks.prev = &blocks;
    atomic_store_explicit(&bytes_held, 0, CUPOOL_RELAXED);
    pthread_mutex_unlock(&blocks_lock);
#ifdef CUPOOL_USE_JEMALLOC
    if (arena_ok) {
        /* Every block is gone: hand the arena's own memory back too. */
        char name[64];
        snprintf(name, sizeof(name), "arena.%u.destroy", arena_index);
        jem_mallctl(name, NULL, NULL, NULL, 0);
        arena_ok = 0;
    }
#endif
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

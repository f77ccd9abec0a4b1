/* SPDX-License-Identifier: MIT */
/*
 * Statistics: per-class counters merged on demand. Fast-path counters live in each thread's
 * slot (single writer, plain stores); the reader sums them over every thread cache, live or
 * retired, without stopping anyone. Never calls the driver.
 */
#include "base/internal.h"
#include "pool/pool.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/lifecycle.h"
#include "base/layer.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

static void class_stats(const struct cupool__class *c, cupool_class_stats_t *out)
{
    uint64_t acquires = 0, releases = 0;
    for (const struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc)) {
        const struct cupool__slot *s = cupool__slot_peek(tc, c->index);
        if (!s)
            continue;
        acquires += atomic_load_explicit(&s->acquires, CUPOOL_RELAXED);
        releases += atomic_load_explicit(&s->releases, CUPOOL_RELAXED);
    }
    /* the index's slots may have served classes before this one */
    acquires = acquires > c->base_acquires ? acquires - c->base_acquires : 0;
    releases = releases > c->base_releases ? releases - c->base_releases : 0;
    uint64_t misses = atomic_load_explicit(&c->misses, CUPOOL_RELAXED);
    int64_t live = atomic_load_explicit(&c->live, CUPOOL_RELAXED);
    uint64_t in_use = acquires > releases ? acquires - releases : 0;
    out->kind = c->ops->kind;
    out->context_id = c->ctx_id;
    out->flags = c->flags;
    out->priority = c->priority;
    out->context_alive = atomic_load_explicit(&c->alive, CUPOOL_RELAXED);
    out->acquires = acquires;
    out->hits = acquires > misses ? acquires - misses : 0;
    out->releases = releases;
    out->creates = atomic_load_explicit(&c->creates, CUPOOL_RELAXED);
    out->destroys = atomic_load_explicit(&c->destroys, CUPOOL_RELAXED);
    out->dropped = atomic_load_explicit(&c->dropped, CUPOOL_RELAXED);
    out->in_use = in_use;
    out->idle = live > (int64_t)in_use ? (uint64_t)live - in_use : 0;
    out->high_water = atomic_load_explicit(&c->high_water, CUPOOL_RELAXED);
}

CUresult cupool_stats_get(cupool_class_stats_t *stats, size_t capacity, size_t *count)
{
    if (cupool__forked())
        return cupool__enter();
    if (!count || (!stats && capacity))
        return CUDA_ERROR_INVALID_VALUE;
    size_t n = 0;
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    uint32_t limit = cupool__class_limit();
    for (uint32_t i = 0; i < limit; i++) {
        const struct cupool__class *c = cupool__class_at(i);
        if (!c || !cupool__class_walkable(c))
            continue;
        if (n < capacity)
            class_stats(c, &stats[n]);
        n++;
    }
    cupool__read_leave(cupool__th(rtc));
    *count = n;
    return CUDA_SUCCESS;
}

/* The pool layer's lines of cupool_stats_print (its report hook, base/layer.h). */
void cupool__pool_report(FILE *out)
{
    fprintf(out,
            "cupool %s statistics, pid %ld: driver %s, metadata %zu bytes from %s, magazine %u%s\n",
            cupool_version(), (long)getpid(), cupool__drv.path[0] ? cupool__drv.path : "(none)",
            cupool__alloc_bytes(), cupool__alloc_name(), cupool__hot.mag_capacity,
            cupool__cfg.disable ? ", pooling disabled (CUPOOL_DISABLE)" : "");
    fprintf(out, "%-6s %7s %5s %4s %5s %12s %12s %10s %10s %8s %7s %7s %6s\n", "kind", "context",
            "flags", "prio", "alive", "acquires", "hits", "creates", "destroys", "dropped",
            "idle", "in_use", "high");
    size_t n = 0;
    struct cupool__tcache *rtc = cupool__tl;
    uint32_t limit = cupool__class_limit();
    for (uint32_t i = 0; i < limit; i++) {
        /* a snapshot inside a read section, the writing outside it: a stream that blocks (a
         * pipe nobody reads) never holds a grace period up */
        cupool__read_enter(cupool__th(rtc));
        const struct cupool__class *c = cupool__class_at(i);
        bool listed = c && cupool__class_walkable(c);
        cupool_class_stats_t s;
        if (listed)
            class_stats(c, &s);
        cupool__read_leave(cupool__th(rtc));
        if (!listed)
            continue;
        n++;
        fprintf(out,
                "%-6s %7llu %#5x %4d %5s %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %10" PRIu64
                " %8" PRIu64 " %7" PRIu64 " %7" PRIu64 " %6" PRIu64 "\n",
                s.kind == CUPOOL_KIND_STREAM ? "stream" : "event", s.context_id, s.flags,
                s.priority, s.context_alive ? "yes" : "no", s.acquires, s.hits, s.creates,
                s.destroys, s.dropped, s.idle, s.in_use, s.high_water);
    }
    if (n == 0)
        fprintf(out, "(no pools used)\n");
}

CUresult cupool_stats_print(FILE *out)
{
    if (cupool__forked())
        return cupool__enter();
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    cupool__layers_report(out);
    fflush(out);
    return CUDA_SUCCESS;
}

size_t cupool_metadata_bytes(void)
{
    return cupool__alloc_bytes();
}

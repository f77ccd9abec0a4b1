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
#include "base/error.h"

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
    out->size = sizeof(*out);
    out->kind = c->ops->kind;
    out->context_id = c->ctx_id;
    out->device = c->device;
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
    /* the caller's element size (cupool.h: the growable structs), the array's stride */
    size_t stride = capacity ? cupool__stats_size(stats) : 0;
    if (capacity && stride < CUPOOL_CLASS_STATS_SIZE_V1)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_stats_get: stats[0].size is %zu, below the %zu bytes of the "
                            "first cupool_class_stats_t (set it to sizeof)",
                            stride, (size_t)CUPOOL_CLASS_STATS_SIZE_V1);
    size_t n = 0;
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    uint32_t limit = cupool__class_limit();
    for (uint32_t i = 0; i < limit; i++) {
        const struct cupool__class *c = cupool__class_at(i);
        if (!c || !cupool__class_walkable(c))
            continue;
        if (n < capacity) {
            cupool_class_stats_t s;
            class_stats(c, &s);
            char *dst = (char *)stats + n * stride;
            __builtin_memcpy(dst, &stride, sizeof(stride)); /* element 0's size for all */
            cupool__stats_put(dst, &s, sizeof(s));
        }
        n++;
    }
    cupool__read_leave(cupool__th(rtc));
    *count = n;
    return CUDA_SUCCESS;
}

/* Every class's statistics, taken in one read section; the writing happens outside it (a
 * stream that blocks, a pipe nobody reads, never holds a grace period up). NULL: no memory.
 * Free with cupool__free(*cap * sizeof). */
static cupool_class_stats_t *classes_snapshot(size_t *n, size_t *cap)
{
    struct cupool__tcache *rtc = cupool__tl;
    for (;;) {
        size_t want = (size_t)cupool__class_limit() + 8;
        cupool_class_stats_t *st = cupool__alloc(want * sizeof(*st));
        if (!st)
            return NULL;
        size_t k = 0;
        cupool__read_enter(cupool__th(rtc));
        uint32_t limit = cupool__class_limit();
        for (uint32_t i = 0; i < limit; i++) {
            const struct cupool__class *c = cupool__class_at(i);
            if (!c || !cupool__class_walkable(c))
                continue;
            if (k < want)
                class_stats(c, &st[k]);
            k++;
        }
        cupool__read_leave(cupool__th(rtc));
        if (k <= want) {
            *n = k;
            *cap = want;
            return st;
        }
        cupool__free(st, want * sizeof(*st)); /* classes were made meanwhile: again */
    }
}

static const char *kind_name(cupool_kind_t kind)
{
    return kind == CUPOOL_KIND_STREAM ? "stream" : "event";
}

static CUresult report_table(FILE *out)
{
    fprintf(out,
            "cupool %s statistics, pid %ld: driver %s, metadata %zu bytes from %s, magazine %u%s\n",
            cupool_version(), (long)getpid(), cupool__drv.path[0] ? cupool__drv.path : "(none)",
            cupool__alloc_bytes(), cupool__alloc_name(), cupool__hot.mag_capacity,
            cupool__cfg.disable ? ", pooling disabled (CUPOOL_DISABLE)" : "");
    /* device last: the columns before it are those of earlier versions */
    fprintf(out, "%-6s %7s %5s %4s %5s %12s %12s %10s %10s %8s %7s %7s %6s %6s\n", "kind",
            "context", "flags", "prio", "alive", "acquires", "hits", "creates", "destroys",
            "dropped", "idle", "in_use", "high", "device");
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
                " %8" PRIu64 " %7" PRIu64 " %7" PRIu64 " %6" PRIu64 " %6d\n",
                kind_name(s.kind), s.context_id, s.flags, s.priority,
                s.context_alive ? "yes" : "no", s.acquires, s.hits, s.creates, s.destroys,
                s.dropped, s.idle, s.in_use, s.high_water, s.device);
    }
    if (n == 0)
        fprintf(out, "(no pools used)\n");
    return CUDA_SUCCESS;
}

/* JSON: this layer opens the object (the base layer's walk closes it); the members of the
 * layers above follow, each with its leading comma. */
static void report_json(FILE *out, const cupool_class_stats_t *st, size_t n,
                        const cupool_maintenance_stats_t *m)
{
    fputs("{\"version\":", out);
    cupool__json_string(out, cupool_version());
    fprintf(out, ",\"pid\":%ld,\"driver\":", (long)getpid());
    if (cupool__drv.path[0])
        cupool__json_string(out, cupool__drv.path);
    else
        fputs("null", out);
    fputs(",\"allocator\":", out);
    cupool__json_string(out, cupool__alloc_name());
    fprintf(out, ",\"metadata_bytes\":%zu,\"magazine_size\":%u,\"pooling_disabled\":%s,",
            cupool__alloc_bytes(), cupool__hot.mag_capacity,
            cupool__cfg.disable ? "true" : "false");
    fputs("\"classes\":[", out);
    for (size_t i = 0; i < n; i++) {
        const cupool_class_stats_t *s = &st[i];
        fprintf(out,
                "%s{\"kind\":\"%s\",\"context_id\":%llu,\"device\":%d,\"flags\":%u,"
                "\"priority\":%d,\"context_alive\":%s,\"acquires\":%" PRIu64 ",\"hits\":%" PRIu64
                ",\"releases\":%" PRIu64 ",\"creates\":%" PRIu64 ",\"destroys\":%" PRIu64
                ",\"dropped\":%" PRIu64 ",\"idle\":%" PRIu64 ",\"in_use\":%" PRIu64
                ",\"high_water\":%" PRIu64 "}",
                i ? "," : "", kind_name(s->kind), s->context_id, s->device, s->flags,
                s->priority, s->context_alive ? "true" : "false", s->acquires, s->hits,
                s->releases, s->creates, s->destroys, s->dropped, s->idle, s->in_use,
                s->high_water);
    }
    fprintf(out,
            "],\"maintenance\":{\"running\":%s,\"wakeups\":%" PRIu64
            ",\"background_creates\":%" PRIu64 ",\"background_destroys\":%" PRIu64
            ",\"request_creates\":%" PRIu64 ",\"request_destroys\":%" PRIu64
            ",\"graph_reaps\":%" PRIu64 "}",
            m->running ? "true" : "false", m->wakeups, m->background_creates,
            m->background_destroys, m->request_creates, m->request_destroys, m->graph_reaps);
}

/* Prometheus: one family per class field, its samples labelled by the class's key. */
#define CLASS_FIELDS(X)                                                                       \
    X(acquires, "counter", "Handles handed out")                                              \
    X(hits, "counter", "Acquires served without creating a handle")                           \
    X(releases, "counter", "Handles given back, pooled or dropped")                           \
    X(creates, "counter", "Driver creations of handles")                                      \
    X(destroys, "counter", "Driver destructions of handles")                                  \
    X(dropped, "counter", "Released handles not pooled (in error, or of a dead context)")     \
    X(idle, "gauge", "Handles alive and not handed out")                                      \
    X(in_use, "gauge", "Handles handed out and not yet released")                             \
    X(high_water, "gauge", "Most handles of the class alive at once")

/* Prometheus takes one sample per label set. A class retired by cupool_context_release while
 * its handles are out is listed beside the new class of the same key (same context id): the
 * context_alive label tells them apart, so the live class's counters only ever grow (a sum
 * of both would fall when the retired one is reclaimed, which a scrape reads as a reset).
 * Retired classes of one key (the context released again while handles of each were out) are
 * one series, their figures summed. */
static bool same_key(const cupool_class_stats_t *a, const cupool_class_stats_t *b)
{
    return a->kind == b->kind && a->context_id == b->context_id && a->device == b->device &&
           a->flags == b->flags && a->priority == b->priority &&
           !a->context_alive == !b->context_alive;
}

static bool key_seen_before(const cupool_class_stats_t *st, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (same_key(&st[k], &st[i]))
            return true;
    return false;
}

/* The sum of `field` over the classes listed from i on with st[i]'s labels. */
#define KEY_SUM(st, n, i, field)                                                              \
    __extension__({                                                                           \
        uint64_t sum_ = 0;                                                                    \
        for (size_t k_ = (i); k_ < (n); k_++)                                                 \
            if (same_key(&(st)[k_], &(st)[i]))                                                \
                sum_ += (st)[k_].field;                                                       \
        sum_;                                                                                 \
    })

static void report_prometheus(FILE *out, const cupool_class_stats_t *st, size_t n,
                              const cupool_maintenance_stats_t *m)
{
    size_t keys = 0;
    for (size_t i = 0; i < n; i++)
        keys += !key_seen_before(st, i);
    fprintf(out,
            "# HELP cupool_info The cupool library loaded, by version\n# TYPE cupool_info gauge\n"
            "cupool_info{version=\"%s\"} 1\n",
            cupool_version()); /* digits and dots: no escaping needed */
    cupool__prom_metric(out, "cupool_metadata_bytes", "gauge",
                        "Bytes of host memory cupool holds for its bookkeeping",
                        (uint64_t)cupool__alloc_bytes());
    cupool__prom_metric(out, "cupool_classes", "gauge", "Pool classes listed below",
                        (uint64_t)keys);
#define FAMILY(field, type, help)                                                             \
    fprintf(out, "# HELP cupool_class_" #field "%s " help "\n# TYPE cupool_class_" #field    \
                 "%s " type "\n",                                                             \
            type[0] == 'c' ? "_total" : "", type[0] == 'c' ? "_total" : "");                  \
    for (size_t i = 0; i < n; i++)                                                            \
        if (!key_seen_before(st, i))                                                          \
            fprintf(out,                                                                      \
                    "cupool_class_" #field "%s{kind=\"%s\",context_id=\"%llu\",device=\"%d\","\
                    "flags=\"0x%x\",priority=\"%d\",context_alive=\"%d\"} %" PRIu64 "\n",     \
                    type[0] == 'c' ? "_total" : "", kind_name(st[i].kind), st[i].context_id,  \
                    st[i].device, st[i].flags, st[i].priority, st[i].context_alive ? 1 : 0,   \
                    KEY_SUM(st, n, i, field));
    CLASS_FIELDS(FAMILY)
#undef FAMILY
    fputs("# HELP cupool_class_context_alive 1 until cupool saw the class's context destroyed "
          "or reset\n# TYPE cupool_class_context_alive gauge\n",
          out);
    for (size_t i = 0; i < n; i++)
        if (!key_seen_before(st, i))
            fprintf(out,
                    "cupool_class_context_alive{kind=\"%s\",context_id=\"%llu\",device=\"%d\","
                    "flags=\"0x%x\",priority=\"%d\",context_alive=\"%d\"} %d\n",
                    kind_name(st[i].kind), st[i].context_id, st[i].device, st[i].flags,
                    st[i].priority, st[i].context_alive ? 1 : 0, st[i].context_alive ? 1 : 0);
    cupool__prom_metric(out, "cupool_maintenance_running", "gauge",
                        "1 while the maintenance thread runs", (uint64_t)(m->running != 0));
    cupool__prom_metric(out, "cupool_maintenance_wakeups_total", "counter",
                        "Rounds of work the maintenance thread ran", m->wakeups);
    cupool__prom_metric(out, "cupool_maintenance_background_creates_total", "counter",
                        "Handles created by the maintenance thread", m->background_creates);
    cupool__prom_metric(out, "cupool_maintenance_background_destroys_total", "counter",
                        "Handles destroyed by the maintenance thread", m->background_destroys);
    cupool__prom_metric(out, "cupool_maintenance_request_creates_total", "counter",
                        "Handles created on callers' threads", m->request_creates);
    cupool__prom_metric(out, "cupool_maintenance_request_destroys_total", "counter",
                        "Handles destroyed on callers' threads", m->request_destroys);
    cupool__prom_metric(out, "cupool_maintenance_graph_reaps_total", "counter",
                        "Graph-cache graveyard reaps run by the maintenance thread",
                        m->graph_reaps);
}

/* The pool layer's part of the statistics (its report hook, base/layer.h): the heading, the
 * classes and the maintenance thread. */
CUresult cupool__pool_report(FILE *out, cupool_stats_format_t format)
{
    if (format == CUPOOL_STATS_FORMAT_TABLE)
        return report_table(out);
    size_t n, cap;
    cupool_class_stats_t *st = classes_snapshot(&n, &cap);
    if (!st)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY,
                            "no memory for a snapshot of the pools' statistics");
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    (void)cupool_maintenance_stats_get(&m);
    if (format == CUPOOL_STATS_FORMAT_JSON)
        report_json(out, st, n, &m);
    else
        report_prometheus(out, st, n, &m);
    cupool__free(st, cap * sizeof(*st));
    return CUDA_SUCCESS;
}

CUresult cupool_stats_print(FILE *out)
{
    return cupool_stats_print_format(out, CUPOOL_STATS_FORMAT_TABLE);
}

CUresult cupool_stats_print_format(FILE *out, cupool_stats_format_t format)
{
    if (cupool__forked())
        return cupool__enter();
    if (!out)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_stats_print: out is NULL");
    if (format != CUPOOL_STATS_FORMAT_TABLE && format != CUPOOL_STATS_FORMAT_JSON &&
        format != CUPOOL_STATS_FORMAT_PROMETHEUS)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_stats_print_format: unknown format %d", (int)format);
    CUresult r = cupool__layers_report(out, format);
    fflush(out);
    return r;
}

size_t cupool_metadata_bytes(void)
{
    return cupool__alloc_bytes();
}

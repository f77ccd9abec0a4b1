/* SPDX-License-Identifier: MIT */
/*
 * A thread's hints (graph_impl.h): storing the entry and exec a launch used, so that the
 * next launch of the signature on the stream claims them without the cache lock.
 */
#include "base/internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "pool/pool.h"
#include "graph/graph_impl.h"

#include <string.h>

const char cupool__hint_any_stream = 0;

static void hints_free(struct cupool__ghints *t)
{
    size_t n = (size_t)t->nsets * HINT_WAYS;
    cupool__free(t->tag, n * sizeof(*t->tag));
    cupool__free(t->h, n * sizeof(*t->h));
    cupool__free(t->ref, t->nsets);
    cupool__free(t->hand, t->nsets);
}

/* Gives t nsets empty sets (its old arrays are the caller's to free). */
static bool hints_alloc(struct cupool__ghints *t, uint32_t nsets)
{
    size_t n = (size_t)nsets * HINT_WAYS;
    struct cupool__ghints fresh = {nsets, cupool__alloc(n * sizeof(*t->tag)),
                                   cupool__alloc(nsets), cupool__alloc(nsets),
                                   cupool__alloc(n * sizeof(*t->h))};
    if (!fresh.tag || !fresh.ref || !fresh.hand || !fresh.h) {
        cupool__free(fresh.tag, n * sizeof(*t->tag));
        cupool__free(fresh.h, n * sizeof(*t->h));
        cupool__free(fresh.ref, nsets);
        cupool__free(fresh.hand, nsets);
        return false;
    }
    memset(fresh.tag, 0, n * sizeof(*t->tag));
    memset(fresh.ref, 0, nsets);
    memset(fresh.hand, 0, nsets);
    *t = fresh;
    return true;
}


/* Doubles the table, keeping every hint. False (nothing changed) when out of memory. */
static void hint_store(struct cupool__ghints *t, const struct ghint *h, bool grow_ok);

static bool hints_grow(struct cupool__ghints *t)
{
    struct cupool__ghints old = *t;
    if (!hints_alloc(t, old.nsets * 2))
        return false;
    for (size_t i = 0; i < (size_t)old.nsets * HINT_WAYS; i++)
        if (old.tag[i])
            hint_store(t, &old.h[i], false);
    hints_free(&old);
    return true;
}

/* Stores h in its set (see the top of this section). */
static void hint_store(struct cupool__ghints *t, const struct ghint *h, bool grow_ok)
{
    uint64_t key = hint_key(h->hash, h->stream), tag = key | 1;
    uint32_t set = hint_set(t, key);
    uint64_t *tags = &t->tag[(size_t)set * HINT_WAYS];
    struct ghint *hs = &t->h[(size_t)set * HINT_WAYS];
    unsigned way = HINT_WAYS;
    for (unsigned w = 0; w < HINT_WAYS && way == HINT_WAYS; w++)
        if (tags[w] == tag && hs[w].hash == h->hash && hs[w].stream == h->stream)
            way = w;
    for (unsigned w = 0; w < HINT_WAYS && way == HINT_WAYS; w++)
        if (!tags[w])
            way = w;
    uint64_t now = atomic_load_explicit(&cupool__cache_epoch.v, CUPOOL_RELAXED);
    for (unsigned w = 0; w < HINT_WAYS && way == HINT_WAYS; w++)
        if (hs[w].epoch != now)
            way = w; /* stale: no claim can use it */
    if (way == HINT_WAYS && grow_ok && t->ref[set] == (1u << HINT_WAYS) - 1 &&
        t->nsets < HINT_SETS_MAX && hints_grow(t)) {
        hint_store(t, h, false);
        return;
    }
    while (way == HINT_WAYS) {
        unsigned w = t->hand[set];
        t->hand[set] = (uint8_t)((w + 1) % HINT_WAYS);
        if (t->ref[set] & (1u << w))
            t->ref[set] &= (uint8_t)~(1u << w);
        else
            way = w;
    }
    tags[way] = tag;
    t->ref[set] |= (uint8_t)(1u << way);
    hs[way] = *h;
}

/* Remembers, in this thread's hints, the entry and exec a launch on stream just kept (entry
 * seen at cache epoch `epoch`, exec of serial `serial`). */
void cupool__hint_put(uint64_t hash, CUstream stream, struct gentry *e, struct gexec *x,
                     uint64_t serial, uint64_t epoch)
{
    struct cupool__tcache *tc = cupool__tcache_self();
    if (!tc)
        return;
    struct cupool__ghints *t = tc->ghints;
    if (CUPOOL_UNLIKELY(!t)) {
        t = cupool__alloc(sizeof(*t));
        if (!t)
            return; /* no hints: launches take the locked path */
        if (!hints_alloc(t, HINT_SETS_MIN)) {
            cupool__free(t, sizeof(*t));
            return;
        }
        tc->ghints = t;
    }
    struct ghint h = {hash, stream, e, x, serial, epoch};
    hint_store(t, &h, true);
}

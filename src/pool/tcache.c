/* SPDX-License-Identifier: MIT */
/*
 * Thread caches: a thread's slots (two magazines per class), their flush at thread exit.
 */
#include "base/internal.h"
#include "pool/pool.h"
#include "pool/pool_impl.h"
#include "base/layer.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/lifecycle.h"
#include "pool/maint.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;
struct cupool__tcache *cupool__tcaches(void)
{
    return (struct cupool__tcache *)cupool__threads();
}

/* ---------------------------------------------------------------------------------------- */
/* Thread caches                                                                            */
/* ---------------------------------------------------------------------------------------- */



const struct cupool__slot *cupool__slot_peek(const struct cupool__tcache *tc, uint32_t index)
{
    if (index < CUPOOL_SLOTS_PER_CHUNK)
        return &tc->slots0[index];
    struct cupool__slot *chunk = atomic_load_explicit(
        (_Atomic(struct cupool__slot *) *)&tc->chunks[index / CUPOOL_SLOTS_PER_CHUNK],
        CUPOOL_ACQUIRE);
    return chunk ? &chunk[index % CUPOOL_SLOTS_PER_CHUNK] : NULL;
}

struct cupool__slot *cupool__slot_get(struct cupool__tcache *tc, uint32_t index)
{
    struct cupool__slot *s = slot_of(tc, index);
    if (s)
        return s;
    struct cupool__slot *chunk = cupool__alloc(CUPOOL_SLOTS_PER_CHUNK * sizeof(*chunk));
    if (!chunk)
        return NULL;
    atomic_store_explicit(&tc->chunks[index / CUPOOL_SLOTS_PER_CHUNK], chunk, CUPOOL_RELEASE);
    return &chunk[index % CUPOOL_SLOTS_PER_CHUNK];
}






/* Moves a slot's magazines to its class's depot (or the global empty stack). No driver call. */
static void slot_flush(struct cupool__class *cls, struct cupool__slot *s)
{
    struct cupool__magazine *mags[2] = {slot_take_loaded(s), s->previous};
    s->previous = NULL;
    for (int i = 0; i < 2; i++) {
        if (!mags[i])
            continue;
        if (mags[i]->count)
            cupool__depot_put(cls, mags[i]);
        else
            cupool__mag_put(mags[i]);
    }
}

void cupool__tcache_flush(struct cupool__tcache *tc)
{
    cupool__read_enter(cupool__th(tc));
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__slot *s = slot_of(tc, i);
        struct cupool__class *cls = cupool__class_at(i);
        if (s && cls)
            slot_flush(cls, s);
    }
    cupool__read_leave(cupool__th(tc));
}

static inline bool class_retired(const struct cupool__class *c)
{
    return !atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) && cupool__class_walkable(c);
}

/* Moves this thread's cached handles of retired classes to their retire stacks, where trim
 * or a reclamation forgets them (no driver call): a retired class can be reclaimed only once
 * no thread caches a handle of it. Only when a class was retired since this thread last
 * looked (one load otherwise); from the slow paths of acquire and release. */
void cupool__tcache_sweep_retired(struct cupool__tcache *tc)
{
    uint64_t now = atomic_load_explicit(&cupool__classes_retired, CUPOOL_RELAXED);
    if (CUPOOL_LIKELY(tc->retired_seen == now))
        return;
    tc->retired_seen = now;
    cupool__read_enter(cupool__th(tc));
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__class *cls = cupool__class_at(i);
        struct cupool__slot *s = cls ? slot_of(tc, i) : NULL;
        if (s && (s->loaded || s->previous) && class_retired(cls))
            slot_flush(cls, s);
    }
    cupool__read_leave(cupool__th(tc));
}

/* pthread key destructor: the exiting thread's cached handles go to the depot, without any
 * driver call, and its cache becomes free for a later thread. */
static void tcache_exit(void *arg)
{
    struct cupool__tcache *tc = arg;
    if (cupool__state_now() != CUPOOL_ST_FORKED)
        cupool__tcache_flush(tc);
    cupool__self = NULL;
    atomic_store_explicit(&tc->th.active, 0, CUPOOL_RELEASE);
}

static void tc_key_create(void)
{
    if (pthread_key_create(&tc_key, tcache_exit) != 0)
        cupool__log(CUPOOL_LOG_ERROR, "pthread_key_create failed: thread caches will not be "
                                      "returned at thread exit");
}

struct cupool__tcache *cupool__tcache_self(void)
{
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL))
        return tc;
    pthread_once(&tc_once, tc_key_create);
    cupool__exit_marker_register();
    tc = (struct cupool__tcache *)cupool__thread_adopt();
    if (!tc) {
        tc = cupool__alloc(sizeof(*tc));
        if (!tc)
            return NULL;
        atomic_store_explicit(&tc->th.active, 1, CUPOOL_RELAXED);
        cupool__thread_push(&tc->th);
    }
    pthread_setspecific(tc_key, tc);
    cupool__self = &tc->th;
    return tc;
}

void cupool__pool_unload(void)
{
    /* No thread-exit destructor may run into an unmapped library. */
    pthread_once(&tc_once, tc_key_create);
    pthread_key_delete(tc_key);
}

void cupool__pool_init(void)
{
    cupool__mag_init(cupool__cfg.magazine_size);
    pthread_once(&tc_once, tc_key_create);
}

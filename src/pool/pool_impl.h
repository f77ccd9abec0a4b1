/* SPDX-License-Identifier: MIT */
/*
 * The pool layer's internal interface between its files (the .c files of src/pool):
 * functions and variables each file defines for the others, and the small inline helpers they
 * share. Not for other layers (they use pool/pool.h).
 */
#ifndef CUPOOL_POOL_IMPL_H
#define CUPOOL_POOL_IMPL_H
#include "base/internal.h"
#include "pool/pool.h"
#include "pool/maint.h"

/* What a check of a class's context found. */
enum ctx_state { CTX_ALIVE, CTX_GONE, CTX_UNKNOWN };

/* Makes `cls`'s context current for a creation, pushing it when another is current;
 * cupool__ctx_leave() undoes it. */
struct ctx_guard {
    bool pushed;
    CUcontext prev;
    CUcontext ctx; /* the context pushed over prev (when pushed) */
};

extern _Atomic(struct cupool__class *) cupool__class_by_index[CUPOOL_MAX_CLASSES];
extern _Atomic uint32_t cupool__classes_dead; /* retired and not yet reclaimed (count) */

/* Each is documented where it is defined. */

/* pool/tcache.c: thread caches */
void cupool__pool_init(void);
void cupool__pool_unload(void);
struct cupool__slot *cupool__slot_get(struct cupool__tcache *tc, uint32_t index);
void cupool__tcache_flush(struct cupool__tcache *tc);
void cupool__tcache_sweep_retired(struct cupool__tcache *tc);

/* pool/class.c: the class table */
CUresult cupool__class_get(const struct cupool__class_ops *ops, CUcontext ctx,
                           unsigned long long ctx_id, unsigned int flags, int priority,
                           struct cupool__class **out);
void cupool__classes_check_contexts(void);
int cupool__classes_reclaim(uint64_t timeout_ns);

/* pool/handle.c: handles off the hot path (accounting, context checks, disposal, the depot
 * exchange, creation) */
bool cupool__class_ask(struct cupool__class *cls, uint32_t bits);
bool cupool__class_ctx_broken(const struct cupool__class *cls);
enum ctx_state cupool__class_ctx_check(struct cupool__class *cls, CUresult *err);
void cupool__class_mark_broken(struct cupool__class *cls);
void cupool__class_mark_dead(struct cupool__class *cls);
CUresult cupool__ctx_enter(struct cupool__class *cls, struct ctx_guard *g);
void cupool__ctx_leave(const struct ctx_guard *g);
bool cupool__depot_put(struct cupool__class *cls, struct cupool__magazine *m);
CUresult cupool__destroy_items(struct cupool__class *cls, struct cupool__magazine *m, uint32_t n);
CUresult cupool__drain_retired(struct cupool__class *cls, int64_t keep, int max);
bool cupool__error_is_sticky(CUresult r);
CUresult cupool__handle_create(struct cupool__class *cls, bool ctx_current, uint32_t state,
                               struct cupool__handle **out);
CUresult cupool__handle_destroy(struct cupool__class *cls, struct cupool__handle *rec);
CUresult cupool__handle_discard(struct cupool__class *cls, struct cupool__handle *rec);
CUresult cupool__handle_dispose(struct cupool__class *cls, struct cupool__handle *rec,
                                enum ctx_state st);
void cupool__handle_forget(struct cupool__class *cls, struct cupool__handle *rec);
void cupool__handle_retire(struct cupool__class *cls, struct cupool__handle *rec);
void cupool__prewarm(struct cupool__class *cls, uint32_t n, bool ctx_current);
struct cupool__handle *cupool__refill(struct cupool__class *cls, struct cupool__slot *s);

/* pool/decay.c: idle capacity that follows demand */
void cupool__class_decay_inline(struct cupool__class *cls);
void cupool__class_missed(struct cupool__class *cls);
int64_t cupool__depot_shrink(struct cupool__class *cls, int64_t target, int max_mags,
                             CUresult *err);

/* pool/acquire.c: the general acquire and release paths */
CUresult cupool__acquire_general(struct cupool__class *cls, bool ctx_current, void **out);
bool cupool__slot_hit_unchecked(struct cupool__tcache *tc, struct cupool__slot *s,
                                struct cupool__mag_item it, void **out);

/* pool/trim.c: trim, close */
void cupool__pool_close(bool all_threads);

static inline struct cupool__slot *slot_of(struct cupool__tcache *tc, uint32_t index)
{
    if (CUPOOL_LIKELY(index < CUPOOL_SLOTS_PER_CHUNK))
        return &tc->slots0[index];
    struct cupool__slot *chunk = atomic_load_explicit(&tc->chunks[index / CUPOOL_SLOTS_PER_CHUNK],
                                                      CUPOOL_RELAXED);
    return chunk ? &chunk[index % CUPOOL_SLOTS_PER_CHUNK] : NULL;
}

/* A slot's loaded magazine keeps its count in the slot (see struct cupool__slot). */
static inline void slot_set_loaded(struct cupool__slot *s, struct cupool__magazine *m)
{
    s->loaded = m;
    s->count = m ? m->count : 0;
    s->limit = m ? cupool__hot.mag_capacity : 0;
}

static inline struct cupool__magazine *slot_take_loaded(struct cupool__slot *s)
{
    struct cupool__magazine *m = s->loaded;
    if (m)
        m->count = s->count;
    s->loaded = NULL;
    s->count = 0;
    s->limit = 0;
    return m;
}

static inline uint64_t decay_now(void)
{
    return CUPOOL_UNLIKELY(cupool__decay_clock != NULL) ? cupool__decay_clock()
                                                        : cupool__monotonic_ns();
}

/* Lowers the depot's recorded minimum to `now_idle` (the decay's measure of demand). */
static inline void depot_min_lower(struct cupool__class *cls, int64_t now_idle)
{
    int64_t m = atomic_load_explicit(&cls->depot_min, CUPOOL_RELAXED);
    while (now_idle < m && !atomic_compare_exchange_weak_explicit(
                               &cls->depot_min, &m, now_idle, CUPOOL_RELAXED, CUPOOL_RELAXED))
        ;
}

/* What the maintenance thread keeps in the depot ahead of demand (count): the larger of the
 * reserve a miss asked for and the headroom the last decay step set. */
static inline int64_t class_ahead(const struct cupool__class *cls)
{
    uint32_t r = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
    uint32_t h = atomic_load_explicit(&cls->headroom, CUPOOL_RELAXED);
    return r > h ? r : h;
}

/* Raises the depot's recorded maximum to `now_idle` (the headroom's measure of the swing). */
static inline void depot_max_raise(struct cupool__class *cls, int64_t now_idle)
{
    int64_t m = atomic_load_explicit(&cls->depot_max, CUPOOL_RELAXED);
    while (now_idle > m && !atomic_compare_exchange_weak_explicit(
                               &cls->depot_max, &m, now_idle, CUPOOL_RELAXED, CUPOOL_RELAXED))
        ;
}

#define STREAM_FLAGS_KNOWN ((unsigned int)CU_STREAM_NON_BLOCKING)

static inline bool event_flags_valid(unsigned int flags)
{
    const unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                               CU_EVENT_INTERPROCESS;
    if (flags & ~known)
        return false;
    /* The driver refuses interprocess events that record timing. */
    return !(flags & CU_EVENT_INTERPROCESS) || (flags & CU_EVENT_DISABLE_TIMING);
}

/* release_handle of pool/acquire.c, out of line. */
CUresult cupool__release_of(const struct cupool__class_ops *ops, struct cupool__class *expect,
                            void *h, uint32_t idle_state);

#endif

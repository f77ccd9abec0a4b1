/* SPDX-License-Identifier: MIT */
/*
 * Classes, thread caches and the handle-type-agnostic pool machinery. A class pools one kind
 * of handle with one set of creation parameters in one context: streams keyed by (context id,
 * flags, clamped priority), events by (context id, flags). Handles of one class are fungible.
 */
#ifndef CUPOOL_POOL_H
#define CUPOOL_POOL_H
#include "base/internal.h"
#include <stdio.h>
#include "pool/magazine.h"
#include "pool/registry.h"
#include "base/lifecycle.h"
#include "base/sync.h"
#include "base/thread.h"
#include "base/driver.h"

#define CUPOOL_CLASS_MAGIC 0x63706f6cu /* "cpol": checks explicit pool arguments */

struct cupool__class;

/* What differs between streams and events. create() runs with the class's context current. */
struct cupool__class_ops {
    cupool_kind_t kind;
    const char *name; /* "stream" / "event", for messages */
    CUresult (*create)(const struct cupool__class *cls, void **handle);
    CUresult (*destroy)(void *handle);
};
extern const struct cupool__class_ops cupool__stream_ops, cupool__event_ops;

/* Releases h if cupool knows it (*result: what the release returned); false, with nothing
 * done, for a handle the registry does not know. The drop-in destroys' single lookup. */
bool cupool__release_known(const struct cupool__class_ops *ops, void *h, CUresult *result);

/* What a class asks of the maintenance thread (its `want` bits). */
#define CUPOOL_CLASS_WANT_DRAIN 1u  /* its retire stack holds magazines over the hard cap */
#define CUPOOL_CLASS_WANT_REFILL 2u /* its depot fell below its reserve */

/* Why a class was retired. */
enum cupool__class_phase {
    CUPOOL_CLASS_LIVE = 0,
    CUPOOL_CLASS_GONE,   /* its context is proven gone: reclaimable once no handle is left */
    CUPOOL_CLASS_BROKEN, /* its context answers but is broken by a sticky error */
    CUPOOL_CLASS_RECLAIMING, /* out of every walk, waiting for the grace period */
    CUPOOL_CLASS_FREE    /* reclaimed: its index waits on the free list for a new class */
};

/*
 * A class. Its struct is bound to its index for the life of the library (allocated on the
 * index's first use, never freed before unload), and reused for a new class once the old one
 * is reclaimed: a class whose context is gone and which has no handle left anywhere (live is
 * 0: none owned, none in any magazine). Reuse moves `gen` on, so an explicit pool handle or a
 * thread's class-cache entry naming the old class no longer matches.
 *
 * Synchronisation. The key fields (ops .. low_water) are written only while the class is not
 * findable (phase FREE or a fresh index, alive 0), under class_lock, and published by the
 * release store of alive = 1; readers that load alive == 1 (acquire) see them whole. Code
 * that reaches a class through the table, a pool handle or a class-cache entry holds it
 * inside a read section (cupool__read_enter), and reclamation waits for those to end
 * (cupool__synchronize) before the struct is reused; a handle's record pins its class (live
 * > 0 forbids reclamation). The depot and retire stacks are lock-free (magazine.h); the
 * counters atomic.
 */
struct cupool__class {
    /* identity: written under class_lock while the class is not findable */
    uint32_t magic;
    uint32_t index; /* slot index in every thread cache; fixed for the struct */
    _Atomic uint64_t gen; /* moves on at each reuse of the struct */
    const struct cupool__class_ops *ops;
    unsigned int flags;
    int priority; /* clamped; 0 for events */
    unsigned long long ctx_id;
    CUcontext ctx;
    int device;         /* the context's device when the class was made; -1: unknown */
    uint32_t idle_max;  /* depot cap (count) */
    uint32_t low_water; /* what cupool_trim() leaves in the depot (count) */
    _Atomic int alive;  /* 1 while live; 0 once retired (phase says why) */
    _Atomic int phase;  /* enum cupool__class_phase */
    /* the per-thread slot counters of this index when the class took it (reuse) */
    uint64_t base_acquires, base_releases;

    /* the depot: shared, lock-free */
    alignas(CUPOOL_CACHELINE) struct cupool__mag_stack depot;
    _Atomic int64_t depot_idle; /* handles in depot magazines (count) */
    alignas(CUPOOL_CACHELINE) struct cupool__mag_stack retire;
    _Atomic int64_t retire_idle; /* handles waiting to be destroyed (count) */

    /* Idle capacity that follows demand (docs/design.md, "Idle capacity"). depot_min: the
     * depot's lowest count since the last decay tick (lowered by poppers, an atomic min; reset
     * by the tick). reserve: the count the maintenance thread keeps in the depot ahead of
     * demand, raised by misses, halved by each tick without one. want: CUPOOL_CLASS_WANT_*
     * bits for the maintenance thread (atomic OR; taken by its exchange). next_tick_ns: when
     * the next decay step is due; whoever moves it on by compare-and-swap runs that step alone,
     * and only that thread touches mins/nmins (the last four ticks' minima). */
    alignas(CUPOOL_CACHELINE) _Atomic int64_t depot_min;
    _Atomic int64_t depot_max; /* the depot's highest count since the last tick (raised by
                                  pushers, an atomic max; reset by the tick) */
    _Atomic uint32_t reserve;
    /* headroom: what the depot keeps beyond the class's recent peak demand, and the
     * maintenance thread refills it to when it runs below half of it: CUPOOL_HEADROOM_PERCENT
     * of the demand's swing over the last decay time (the depot's highest count less its
     * lowest), set by each decay step (count; 0 before the first, and after a trim) */
    _Atomic uint32_t headroom;
    _Atomic uint32_t want;
    _Atomic bool missed;      /* a miss since the last tick */
    _Atomic bool reserve_met; /* the maintenance thread filled the depot up to reserve since
                                 the reserve last grew (a miss grows it once per fill) */
    _Atomic bool warm;        /* past its first decay tick: misses from here on are growth
                                 beyond the demand the class was built for, not its warm-up */
    _Atomic uint64_t next_tick_ns;
    int64_t mins[4], maxes[4];
    _Atomic bool forget; /* set by a trim: the next tick drops the recorded minima and maxima */
    uint32_t nmins;
    int64_t decay_due; /* handles a decay step left to the maintenance thread's next rounds */
    int64_t grow_due;  /* handles a decay step found the depot short of over its last interval
                          (its low point below what it keeps ahead), for the maintenance
                          thread's next rounds to create; touched by the tick's owner alone */

    /* slow-path counters (atomic read-modify-write is fine here: microsecond paths) */
    alignas(CUPOOL_CACHELINE) _Atomic uint64_t creates, destroys, dropped, misses;
    _Atomic int64_t live; /* handles alive: in use + idle */
    _Atomic uint64_t high_water;
};

static inline uint32_t cupool__class_index(const struct cupool__class *cls)
{
    return cls ? cls->index : 0;
}

/* The low 32 bits of a class's generation, as records carry it. A record's class is never
 * reclaimed while the record is registered, so a live record's gen is its class's now. */
static inline uint32_t cupool__class_gen32(const struct cupool__class *cls)
{
    return cls ? (uint32_t)atomic_load_explicit(&cls->gen, memory_order_relaxed) : 0;
}

static inline uint32_t cupool__class_kind(const struct cupool__class *cls)
{
    return cls ? (uint32_t)cls->ops->kind : 0;
}

/* ---- explicit-pool values ----
 * A pool value names a class by index and generation, not by address: a class is reused once
 * its context is gone and nothing of it is left (classes_reclaim), and a value of the old
 * class must then be refused, never serve the new one (pool/api.c). Bits 0-3: a tag per kind; bit 4: the
 * caller's promise that the context outlives the pool's use (CUPOOL_POOL_CONTEXT_OUTLIVES);
 * bits 5-18: the index; bits 19-63: the class's gen. Never NULL. */
#define POOL_TAG_STREAM 0x5u
#define POOL_TAG_EVENT 0x9u
#define POOL_PROMISED 0x10u
#define POOL_INDEX_SHIFT 5
#define POOL_GEN_SHIFT 19

/* The pool value, with the promise bit set, of the class of (kind, index, gen): what the
 * class's records carry (struct cupool__handle's pool_word), so that one compare matches a
 * pool value of either promise against a record's kind, index and gen (pool/api.c). */
static inline uint64_t cupool__pool_word(uint32_t kind, uint32_t index, uint64_t gen)
{
    return gen << POOL_GEN_SHIFT | (uint64_t)index << POOL_INDEX_SHIFT | POOL_PROMISED |
           (kind == CUPOOL_KIND_STREAM ? POOL_TAG_STREAM : POOL_TAG_EVENT);
}

/* A thread's share of one class: two magazines and its single-writer counters. */
struct cupool__slot {
    struct cupool__magazine *loaded;
    uint32_t count; /* the loaded magazine's count, authoritative while it is loaded (its own
                       `count` is written back when it leaves): one dependent load less */
    uint32_t limit; /* the loaded magazine's capacity, 0 when none is loaded: a release
                       pushes while count < limit, an acquire pops while count > 0, and
                       neither tests `loaded` */
    struct cupool__magazine *previous;
    _Atomic uint64_t acquires;
    _Atomic uint64_t releases;
};

#define CUPOOL_SLOTS_PER_CHUNK 64
#define CUPOOL_MAX_SLOT_CHUNKS 256 /* 16384 classes */
#define CUPOOL_MAX_CLASSES (CUPOOL_SLOTS_PER_CHUNK * CUPOOL_MAX_SLOT_CHUNKS)
/* The per-thread class cache of the current-context API: CUPOOL_CC_SETS sets of
 * CUPOOL_CC_WAYS entries, so keys that share a set (priorities 0 and -4 shared the one entry
 * of a direct-mapped cache) both stay cached. */
#define CUPOOL_CC_SETS 32
#define CUPOOL_CC_WAYS 2

/* Per-thread class cache entry for the current-context API. `word` is the class's pool word
 * (cupool__pool_word: its kind, index and gen) when the entry was filled: the hit matches a
 * record's pool_word against it, and the entry stands only while the class's own word is
 * still that (the struct may have been reused for another class since). 32 bytes: a set of
 * two ways is one cache line. */
struct cupool__cc_entry {
    unsigned long long ctx_id;
    uint64_t key; /* flags << 32 | (uint32_t)requested priority */
    struct cupool__class *cls;
    uint64_t word;
};

/* The class index a pool word names (see cupool__pool_word). */
static inline uint32_t cupool__pool_word_index(uint64_t word)
{
    return (uint32_t)(word >> POOL_INDEX_SHIFT) & (CUPOOL_MAX_CLASSES - 1);
}

/* The graph cache keeps its counters per device (cupool_graph_stats_device_get): a slot per
 * device ordinal below CUPOOL_STATS_DEVICES, and CUPOOL_GDEV_UNKNOWN for the entries whose
 * device is not known (the driver did not say, or a higher ordinal). */
#define CUPOOL_GDEV_UNKNOWN CUPOOL_STATS_DEVICES
#define CUPOOL_GDEV_SLOTS (CUPOOL_STATS_DEVICES + 1)

/* A thread's memories of its graph-cache launches (src/graph/launch.c, struct cupool__ghints):
 * per signature and stream, the entry and exec it used last, for a lock-free claim of the
 * same exec next time. Only hints, validated before use; allocated by the thread's first
 * graph launch, read and written by the thread that holds the cache alone. */
struct cupool__ghints;

/* Per-thread state. Type-stable: kept on a global list and reused by later threads, so the
 * statistics reader can always walk it. */
struct cupool__tcache {
    struct cupool__thread th; /* the base layer's part (base/thread.h): first, so the record
                                 and the cache are one pointer */
    struct cupool__slot slots0[CUPOOL_SLOTS_PER_CHUNK]; /* classes 0..63: one load less */
    _Atomic(struct cupool__slot *) chunks[CUPOOL_MAX_SLOT_CHUNKS]; /* [0] unused */
    /* [cupool_kind_t]; a set per cache line */
    alignas(CUPOOL_CACHELINE) struct cupool__cc_entry cc[2][CUPOOL_CC_SETS][CUPOOL_CC_WAYS];
    /* The record of the handle this thread acquired last: a release of that very handle (the
     * common acquire, use, release on one thread) finds it here without a registry lookup.
     * Only a hint: a release trusts it only if the record still names the handle. */
    struct cupool__handle *last;
    /* The stream priority range of the context this thread's class lookups asked about last
     * (context id, least, greatest): a lookup that missed the class cache needs no driver call
     * for the clamp when the context is the same. A context id is never reused. */
    unsigned long long prio_ctx_id;
    int prio_least, prio_greatest;
    /* cupool__classes_retired when this thread last moved the handles of retired classes
     * out of its magazines (so that those classes can be reclaimed) */
    uint64_t retired_seen;
    struct cupool__ghints *ghints;
    /* This thread's graph-cache counters, per device slot of the entry (CUPOOL_GDEV_SLOTS); the
     * whole cache's figures are their sums. hits: claimed through ghints, without the lock (a
     * repeat launch makes one store to this thread's own line, as with one counter); updates,
     * nodes_updated: its exec updates. */
    _Atomic uint64_t graph_hits[CUPOOL_GDEV_SLOTS];
    _Atomic uint64_t graph_updates[CUPOOL_GDEV_SLOTS], graph_nodes_updated[CUPOOL_GDEV_SLOTS];
    _Atomic uint64_t graph_compared; /* node parameters its launches compared with an exec's */
};

_Static_assert(offsetof(struct cupool__tcache, th) == 0, "a thread's record is its cache");
/* The calling thread's cache (its record, base/thread.h), NULL before its first use. */
#define cupool__tl ((struct cupool__tcache *)cupool__self)
/* The base layer's record of a cache (NULL for NULL). */
static inline struct cupool__thread *cupool__th(struct cupool__tcache *tc)
{
    return (struct cupool__thread *)tc;
}
/* The next cache on the list (cupool__tcaches). */
static inline struct cupool__tcache *cupool__tc_next(const struct cupool__tcache *tc)
{
    return (struct cupool__tcache *)tc->th.next;
}

/* Reclamation that a read section asked for (a replaced registry table, classes retired past
 * the threshold) runs after the section, never inside one: set by the section, checked by
 * the public calls on their way out (one relaxed load), done by cupool__reclaim_deferred(). */
void cupool__reclaim_deferred(void);
static inline void cupool__reclaim_if_due(void)
{
    if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.reclaim_due, CUPOOL_RELAXED)))
        cupool__reclaim_deferred();
}

/* A registry lookup inside a read section of its own. */
static inline struct cupool__handle *cupool__reg_read(struct cupool__tcache *tc, const void *h)
{
    cupool__read_enter(cupool__th(tc));
    struct cupool__handle *rec = cupool__registry_lookup(h);
    cupool__read_leave(cupool__th(tc));
    return rec;
}





/* Is ctx still the context whose id was ctx_id? 1: yes; 0: gone (another id now, destroyed,
 * broken by a sticky error); -1: unknown (*err: another driver error, or DEINITIALIZED when
 * the driver may not be called). One cuCtxGetId(ctx). */
int cupool__ctx_verdict(CUcontext ctx, unsigned long long ctx_id, CUresult *err);
/* Did a call on an object of ctx fail with r because ctx is broken by a sticky error? True
 * only when r is sticky and the driver confirms it (cuCtxGetId(NULL) with ctx pushed current
 * answers with the sticky error); the caller's context stack is left as it was. */
bool cupool__ctx_broken_by(CUcontext ctx, unsigned long long ctx_id, CUresult r);


/* The calling thread's cache, registering it (and its exit hook) first if needed; NULL only
 * when out of memory. */
struct cupool__tcache *cupool__tcache_self(void);
/* The calling thread's cache if it has one; never allocates. */
static inline struct cupool__tcache *cupool__tcache_peek(void)
{
    return cupool__tl;
}

/* The pool layer's lines of cupool_stats_print (stats.c). */
CUresult cupool__pool_report(FILE *out, cupool_stats_format_t format);

/* Test hook, NULL outside tests: called when a class lookup missed, before the class is
 * created, to widen the window in which racing creators meet. */
extern void (*cupool__class_miss_hook)(void);
/* Test hooks, NULL outside tests: in cupool_*_pool_get between finding the class and reading
 * its gen, and in a reclamation between moving the gens of its candidates on and its grace
 * period. */
extern void (*cupool__pool_get_hook)(void);
extern void (*cupool__reclaim_gen_hook)(void);

/* Classes retired so far (count); threads compare it with their retired_seen. */
extern _Atomic uint64_t cupool__classes_retired;

/* A class a walker of the table may touch (trim, sweeps, statistics): live (alive, its fields
 * published by that store), or retired and not reclaimed (its fields fixed). A struct being
 * filled for a new class (phase LIVE, alive not yet 1), one being reclaimed and a reclaimed
 * one (FREE) are none of these. Inside a read section. */
static inline bool cupool__class_walkable(const struct cupool__class *c)
{
    if (atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE))
        return true;
    int phase = atomic_load_explicit(&c->phase, CUPOOL_ACQUIRE);
    return phase == CUPOOL_CLASS_GONE || phase == CUPOOL_CLASS_BROKEN;
}

/* Classes by index: indexes below cupool__class_limit(); NULL for an index never used, and
 * phase CUPOOL_CLASS_FREE for one reclaimed. Read inside a read section. */
uint32_t cupool__class_limit(void);
struct cupool__class *cupool__class_at(uint32_t index);
struct cupool__tcache *cupool__tcaches(void);

/* Per-slot counters of class `index` in `tc`, summed by the statistics reader. */
const struct cupool__slot *cupool__slot_peek(const struct cupool__tcache *tc, uint32_t index);

/* Stream-specific steps the hot path calls (stream_pool.c). The clamp runs with the context
 * current; `ctx_id` (0: unknown) lets the thread's cache of the range answer. */
CUresult cupool__stream_priority_clamp(int requested, int *clamped);
CUresult cupool__stream_priority_clamp_as(unsigned long long ctx_id, int requested, int *clamped);

#endif

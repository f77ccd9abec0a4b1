/* SPDX-License-Identifier: MIT */
/*
 * Registry: driver handle -> record of the handle cupool created. A release finds its handle's
 * class and ownership state here, which is how foreign, double and cross-type releases are
 * caught. Lookups are lock-free (an open-addressing table read with atomic loads); inserts and
 * removals happen only where the driver is called to create or destroy a handle (microseconds
 * anyway) and take one mutex. Records are type-stable: never freed while the library is
 * loaded, so a lookup racing with a removal reads a record that is stale, never freed memory.
 */
#ifndef CUPOOL_REGISTRY_H
#define CUPOOL_REGISTRY_H
#include "base/internal.h"

struct cupool__class;

enum cupool__handle_state {
    CUPOOL_H_FREE = 0,     /* record not in use */
    CUPOOL_H_OWNED,        /* handed out to a caller */
    CUPOOL_H_IDLE,         /* pooled, known clean */
    CUPOOL_H_IDLE_UNCHECKED, /* pooled stream not yet checked for capture (see pool/hot.h) */
    CUPOOL_H_STALE           /* its handle value was destroyed behind cupool's back (context
                                reset) and the driver gave the value to a new handle: the
                                record is out of the table and must never reach the driver */
};

/* One cache line per record: records of different threads' handles must not share a line,
 * or every acquire and release would bounce it between their cores (seen on an H200 host:
 * 2 threads ran 4x slower per pair with 32-byte records). */
struct cupool__handle {
    alignas(CUPOOL_CACHELINE) _Atomic(void *) handle; /* CUstream or CUevent; NULL when free */
    _Atomic(struct cupool__class *) cls;  /* owning class; set before publication */
    _Atomic uint32_t state;               /* enum cupool__handle_state */
    uint32_t index;                       /* copies of the class's index and kind, so a */
    uint32_t kind;                        /* release needs no load from the class */
    uint32_t gen;                         /* the low 32 bits of the class's gen at insert: an
                                             explicit pool (index, gen) matches its handles
                                             without loading the class (pool/hot.h) */
    uint64_t pool_word;                   /* cupool__pool_word of the class at insert: an
                                             explicit pool's value, its promise bit set, is
                                             this word exactly when it names this record's
                                             kind, index and gen */
    struct cupool__handle *next_free;     /* free list, under the registry mutex */
};

/* The table, exposed so the hot path can inline lookups. Open addressing with linear
 * probing over (key, record) pairs: the key is the handle value itself, so a probe compares
 * keys in the table and dereferences only the record it is looking for. (Reading records
 * while probing made each lookup touch other threads' records, whose cache lines their owners
 * keep writing; at 16 threads that cost more than the rest of the pair.) A key is NULL (never
 * used: ends a probe), CUPOOL_REG_TOMBSTONE (removed: probe on) or a handle. The published
 * word packs the table's address (64-byte aligned) with log2 of its slot count in the low 6
 * bits, so a lookup reads no table header. */
#define CUPOOL_REG_TOMBSTONE ((const void *)1)
struct cupool__reg_slot {
    _Atomic(const void *) key;
    _Atomic(struct cupool__handle *) rec;
};
struct cupool__reg_table {
    size_t mask;                            /* slots - 1, slots a power of two */
    size_t live, tombs;                     /* under the registry mutex */
    struct cupool__reg_table *retired_next; /* older tables, kept for readers inside them */
    uint32_t bits;                          /* log2(slots) */
    alignas(CUPOOL_CACHELINE) struct cupool__reg_slot slots[];
};

/* Slot of `p` in a table of 2^bits slots: Fibonacci hashing keeps the product's high bits,
 * which mix every bit of the address (its low bits are mere alignment). bits >= 6. */
static inline size_t cupool__reg_hash(const void *p, uint32_t bits)
{
    return (size_t)(((uint64_t)(uintptr_t)p * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - bits));
}

/* Record of `handle`, or NULL if cupool does not hold it. Lock-free; any thread. */
static inline struct cupool__handle *cupool__registry_lookup(const void *handle)
{
    uintptr_t word = atomic_load_explicit(&cupool__hot.reg_current, CUPOOL_ACQUIRE);
    struct cupool__reg_table *t = (struct cupool__reg_table *)(word & ~(uintptr_t)63);
    uint32_t bits = (uint32_t)(word & 63);
    if (CUPOOL_UNLIKELY(!t || !handle || handle == CUPOOL_REG_TOMBSTONE))
        return NULL;
    size_t mask = ((size_t)1 << bits) - 1;
    for (size_t i = cupool__reg_hash(handle, bits);; i = (i + 1) & mask) {
        const void *key = atomic_load_explicit(&t->slots[i].key, CUPOOL_ACQUIRE);
        if (CUPOOL_LIKELY(key == handle)) {
            struct cupool__handle *rec = atomic_load_explicit(&t->slots[i].rec, CUPOOL_ACQUIRE);
            /* a removal may race with this read: trust the record only if it agrees */
            if (CUPOOL_LIKELY(rec != NULL &&
                              atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) == handle))
                return rec;
        }
        if (!key)
            return NULL;
    }
}

/* Records a handle just created for `cls`, in `state`. NULL if out of memory (the caller then
 * destroys the handle). A record still registered under the same value (the driver reuses
 * values of destroyed streams; a context reset destroys them without cupool) is marked
 * CUPOOL_H_STALE and taken out of the table; whoever holds it frees it with _remove(). */
struct cupool__handle *cupool__registry_insert(void *handle, struct cupool__class *cls,
                                               uint32_t state);

/* Forgets a record (its handle is being destroyed or abandoned) and recycles it. Returns false
 * if the record was stale: its handle value then belongs to another handle, so the caller must
 * not pass it to the driver. */
bool cupool__registry_remove(struct cupool__handle *rec);

/* Frees replaced tables once no reader can be inside them, waiting up to timeout_ns for that
 * (see cupool__reclaim_deferred). False when some had to be kept for a later call. */
bool cupool__registry_reclaim(uint64_t timeout_ns);

/* Handles registered now (count). */
size_t cupool__registry_count(void);

#endif

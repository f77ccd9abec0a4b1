/* SPDX-License-Identifier: MIT */
#include "internal.h"
#include "registry.h"
#include "alloc.h"
#include "pool.h"

#include <pthread.h>

/* The table is rebuilt, larger when needed, once live entries plus tombstones pass 3/4 of the
 * slots; the old table stays allocated (readers may be inside it) on a retired list. */
#define TOMBSTONE CUPOOL_REG_TOMBSTONE
typedef struct cupool__reg_table table_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic uintptr_t cupool__reg_current;

/* Under the mutex (or by the lock-free reader's rules): the current table. */
static table_t *current_table(void)
{
    return (table_t *)(atomic_load_explicit(&cupool__reg_current, CUPOOL_RELAXED) &
                       ~(uintptr_t)63);
}

static inline size_t hash_ptr(const table_t *t, const void *p)
{
    return cupool__reg_hash(p, t->bits);
}
static table_t *retired;
static struct cupool__handle *free_records;

static size_t table_bytes(size_t nslots)
{
    return sizeof(table_t) + nslots * sizeof(struct cupool__handle *);
}

static void place(table_t *t, struct cupool__handle *rec)
{
    void *h = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
    size_t i = hash_ptr(t, h) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        struct cupool__handle *cur = atomic_load_explicit(&t->slots[i], CUPOOL_RELAXED);
        if (!cur || cur == TOMBSTONE) {
            if (cur == TOMBSTONE)
                t->tombs--;
            atomic_store_explicit(&t->slots[i], rec, CUPOOL_RELEASE);
            t->live++;
            return;
        }
    }
}

/* Under the mutex: makes room for one more entry, rebuilding the table when needed. */
static int reserve(void)
{
    table_t *t = current_table();
    if (t && (t->live + t->tombs + 1) * 4 <= (t->mask + 1) * 3)
        return 0;
    size_t need = t ? t->live + 1 : 1;
    size_t n = 64;
    while (n < need * 2)
        n *= 2;
    table_t *fresh = cupool__alloc(table_bytes(n));
    if (!fresh)
        return -1;
    fresh->mask = n - 1;
    while (((size_t)1 << fresh->bits) < n)
        fresh->bits++;
    if (t) {
        for (size_t i = 0; i <= t->mask; i++) {
            struct cupool__handle *rec = atomic_load_explicit(&t->slots[i], CUPOOL_RELAXED);
            if (rec && rec != TOMBSTONE)
                place(fresh, rec);
        }
        t->retired_next = retired;
        retired = t;
    }
    atomic_store_explicit(&cupool__reg_current, (uintptr_t)fresh | fresh->bits, CUPOOL_RELEASE);
    return 0;
}

static struct cupool__handle *record_new(void)
{
    if (!free_records) {
        enum { BATCH = 256 };
        struct cupool__handle *batch = cupool__alloc(BATCH * sizeof(*batch));
        if (!batch)
            return NULL;
        for (int i = 0; i < BATCH; i++) {
            batch[i].next_free = free_records;
            free_records = &batch[i];
        }
    }
    struct cupool__handle *rec = free_records;
    free_records = rec->next_free;
    return rec;
}

/* Under the mutex: takes the record registered for `handle`, if any, out of the table. */
static void evict_stale(const void *handle)
{
    table_t *t = current_table();
    if (!t)
        return;
    for (size_t i = hash_ptr(t, handle) & t->mask;; i = (i + 1) & t->mask) {
        struct cupool__handle *cur = atomic_load_explicit(&t->slots[i], CUPOOL_RELAXED);
        if (!cur)
            return;
        if (cur != TOMBSTONE && atomic_load_explicit(&cur->handle, CUPOOL_RELAXED) == handle) {
            atomic_store_explicit(&cur->state, CUPOOL_H_STALE, CUPOOL_RELAXED);
            atomic_store_explicit(&t->slots[i], TOMBSTONE, CUPOOL_RELEASE);
            t->live--;
            t->tombs++;
            return;
        }
    }
}

struct cupool__handle *cupool__registry_insert(void *handle, struct cupool__class *cls,
                                               uint32_t state)
{
    pthread_mutex_lock(&reg_lock);
    evict_stale(handle);
    struct cupool__handle *rec = NULL;
    if (reserve() == 0 && (rec = record_new()) != NULL) {
        atomic_store_explicit(&rec->cls, cls, CUPOOL_RELAXED);
        rec->index = cupool__class_index(cls);
        rec->kind = cupool__class_kind(cls);
        rec->next_free = NULL;
        atomic_store_explicit(&rec->state, state, CUPOOL_RELAXED);
        atomic_store_explicit(&rec->handle, handle, CUPOOL_RELAXED);
        place(current_table(), rec);
    }
    pthread_mutex_unlock(&reg_lock);
    return rec;
}

bool cupool__registry_remove(struct cupool__handle *rec)
{
    pthread_mutex_lock(&reg_lock);
    bool live = atomic_load_explicit(&rec->state, CUPOOL_RELAXED) != CUPOOL_H_STALE;
    table_t *t = current_table();
    void *h = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
    for (size_t i = hash_ptr(t, h) & t->mask; live; i = (i + 1) & t->mask) {
        struct cupool__handle *cur = atomic_load_explicit(&t->slots[i], CUPOOL_RELAXED);
        if (!cur)
            break; /* not present: nothing to do */
        if (cur == rec) {
            atomic_store_explicit(&t->slots[i], TOMBSTONE, CUPOOL_RELEASE);
            t->live--;
            t->tombs++;
            break;
        }
    }
    atomic_store_explicit(&rec->state, CUPOOL_H_FREE, CUPOOL_RELAXED);
    atomic_store_explicit(&rec->handle, NULL, CUPOOL_RELAXED);
    rec->next_free = free_records;
    free_records = rec;
    pthread_mutex_unlock(&reg_lock);
    return live;
}

size_t cupool__registry_count(void)
{
    pthread_mutex_lock(&reg_lock);
    table_t *t = current_table();
    size_t n = t ? t->live : 0;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

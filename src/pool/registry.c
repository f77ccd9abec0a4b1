/* SPDX-License-Identifier: MIT */
#include "base/internal.h"
#include "pool/registry.h"
#include "base/alloc.h"
#include "pool/pool.h"

#include <pthread.h>

/* Writers hold the mutex. The table is rebuilt once live entries plus tombstones pass half
 * of the slots (short probes keep lookups in one or two cache lines), at twice the live count
 * or more; the old table goes on a retired list until no lock-free reader can be inside it
 * (readers announce themselves, see cupool__reg_read in pool/pool.h), then it is freed.
 * Writers publish a slot's record before its key (release), readers load the key first
 * (acquire), so a reader that sees a key sees its record. */
#define TOMBSTONE CUPOOL_REG_TOMBSTONE
typedef struct cupool__reg_table table_t;

/* Lock order (docs/design.md, "Locks"): after class_lock and the graph cache's, before the
 * allocator's; released before a grace period. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static table_t *retired;
static struct cupool__handle *free_records;

static table_t *current_table(void)
{
    return (table_t *)(atomic_load_explicit(&cupool__hot.reg_current, CUPOOL_RELAXED) &
                       ~(uintptr_t)63);
}

static size_t table_bytes(size_t nslots)
{
    return sizeof(table_t) + nslots * sizeof(struct cupool__reg_slot);
}

static void place(table_t *t, struct cupool__handle *rec)
{
    const void *h = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
    for (size_t i = cupool__reg_hash(h, t->bits);; i = (i + 1) & t->mask) {
        const void *key = atomic_load_explicit(&t->slots[i].key, CUPOOL_RELAXED);
        if (!key || key == TOMBSTONE) {
            if (key == TOMBSTONE)
                t->tombs--;
            atomic_store_explicit(&t->slots[i].rec, rec, CUPOOL_RELEASE);
            atomic_store_explicit(&t->slots[i].key, h, CUPOOL_RELEASE);
            t->live++;
            return;
        }
    }
}

/* The slot holding `h`, or NULL. */
static struct cupool__reg_slot *find(table_t *t, const void *h)
{
    if (!t)
        return NULL;
    for (size_t i = cupool__reg_hash(h, t->bits);; i = (i + 1) & t->mask) {
        const void *key = atomic_load_explicit(&t->slots[i].key, CUPOOL_RELAXED);
        if (key == h)
            return &t->slots[i];
        if (!key)
            return NULL;
    }
}

static void erase(table_t *t, struct cupool__reg_slot *slot)
{
    atomic_store_explicit(&slot->key, TOMBSTONE, CUPOOL_RELEASE);
    atomic_store_explicit(&slot->rec, NULL, CUPOOL_RELEASE);
    t->live--;
    t->tombs++;
}

/* Makes room for one more entry, rebuilding the table when needed. */
static int reserve(void)
{
    table_t *t = current_table();
    if (t && (t->live + t->tombs + 1) * 2 <= t->mask + 1)
        return 0;
    size_t need = t ? t->live + 1 : 1;
    size_t n = 64;
    while (n < need * 4)
        n *= 2;
    table_t *fresh = cupool__alloc(table_bytes(n));
    if (!fresh)
        return -1;
    fresh->mask = n - 1;
    while (((size_t)1 << fresh->bits) < n)
        fresh->bits++;
    if (t) {
        for (size_t i = 0; i <= t->mask; i++) {
            const void *key = atomic_load_explicit(&t->slots[i].key, CUPOOL_RELAXED);
            if (key && key != TOMBSTONE)
                place(fresh, atomic_load_explicit(&t->slots[i].rec, CUPOOL_RELAXED));
        }
        t->retired_next = retired;
        retired = t;
    }
    atomic_store_explicit(&cupool__hot.reg_current, (uintptr_t)fresh | fresh->bits, CUPOOL_RELEASE);
    return 0;
}

/* Frees the tables replaced so far once no lock-free reader can be inside them; called
 * without the registry's lock and outside any read section of the caller's
 * (cupool__reclaim_deferred). If that cannot be shown now (a reader held up), a later call
 * tries again (false: some are kept). Without this, a table would be kept for every rehash
 * that clears tombstones: memory growing with the number of handles ever created. */
bool cupool__registry_reclaim(uint64_t timeout_ns)
{
    pthread_mutex_lock(&reg_lock);
    table_t *old = retired;
    retired = NULL;
    pthread_mutex_unlock(&reg_lock);
    if (!old)
        return true;
    if (cupool__synchronize(timeout_ns)) {
        while (old) {
            table_t *next = old->retired_next;
            cupool__free(old, table_bytes(old->mask + 1));
            old = next;
        }
        return true;
    }
    pthread_mutex_lock(&reg_lock);
    table_t *last = old;
    while (last->retired_next)
        last = last->retired_next;
    last->retired_next = retired;
    retired = old;
    pthread_mutex_unlock(&reg_lock);
    return false;
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

struct cupool__handle *cupool__registry_insert(void *handle, struct cupool__class *cls,
                                               uint32_t state)
{
    pthread_mutex_lock(&reg_lock);
    /* A record still registered under this value lost its handle behind cupool's back. */
    table_t *t = current_table();
    struct cupool__reg_slot *old = find(t, handle);
    if (old) {
        struct cupool__handle *stale = atomic_load_explicit(&old->rec, CUPOOL_RELAXED);
        atomic_store_explicit(&stale->state, CUPOOL_H_STALE, CUPOOL_RELAXED);
        erase(t, old);
    }
    struct cupool__handle *rec = NULL;
    if (reserve() == 0 && (rec = record_new()) != NULL) {
        atomic_store_explicit(&rec->cls, cls, CUPOOL_RELAXED);
        rec->index = cupool__class_index(cls);
        rec->kind = cupool__class_kind(cls);
        rec->gen = cupool__class_gen32(cls);
        rec->pool_word = cupool__pool_word(
            rec->kind, rec->index, cls ? atomic_load_explicit(&cls->gen, CUPOOL_RELAXED) : 0);
        rec->next_free = NULL;
        atomic_store_explicit(&rec->state, state, CUPOOL_RELAXED);
        atomic_store_explicit(&rec->handle, handle, CUPOOL_RELAXED);
        place(current_table(), rec);
    }
    bool replaced = retired != NULL;
    pthread_mutex_unlock(&reg_lock);
    if (replaced) /* freed once the caller is out of its read sections */
        atomic_store_explicit(&cupool__hot.reclaim_due, true, CUPOOL_RELAXED);
    return rec;
}

bool cupool__registry_remove(struct cupool__handle *rec)
{
    pthread_mutex_lock(&reg_lock);
    bool live = atomic_load_explicit(&rec->state, CUPOOL_RELAXED) != CUPOOL_H_STALE;
    if (live) {
        table_t *t = current_table();
        struct cupool__reg_slot *slot = find(t, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED));
        if (slot && atomic_load_explicit(&slot->rec, CUPOOL_RELAXED) == rec)
            erase(t, slot);
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

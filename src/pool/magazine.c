/* SPDX-License-Identifier: MIT */
#include "base/internal.h"
#include "pool/magazine.h"
#include "base/alloc.h"
#include "base/config.h"

#include <pthread.h>

void (*cupool__stack_pop_hook)(struct cupool__mag_stack *, struct cupool__magazine *);

/* Magazine table: id -> magazine, in chunks allocated on demand and never freed, so a lookup
 * is two loads and needs no lock. 4096 chunks x 1024 = 4M magazines at most. */
#define CHUNK_BITS 10
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096
static _Atomic(struct cupool__magazine **) chunks[MAX_CHUNKS];
static _Atomic uint32_t next_id = 1;
static struct cupool__mag_stack empty_stack;

/* The capacity is fixed before the first magazine is made, for magazines are allocated with
 * it: set by cupool__mag_init (the pool layer's init hook, or a test), else taken from the
 * configuration by the first mag_new; once a magazine exists it never changes (a pool layer
 * whose hooks registered late, after a magazine was made, keeps the capacity in use). */
static _Atomic bool sized, frozen;
static pthread_once_t freeze_once = PTHREAD_ONCE_INIT;

void cupool__mag_init(uint32_t capacity)
{
    if (atomic_load_explicit(&frozen, CUPOOL_ACQUIRE))
        return;
    cupool__hot.mag_capacity = capacity;
    atomic_store_explicit(&sized, true, CUPOOL_RELEASE);
}

static void freeze(void)
{
    if (!atomic_load_explicit(&sized, CUPOOL_ACQUIRE))
        cupool__mag_init(cupool__cfg.magazine_size);
    atomic_store_explicit(&frozen, true, CUPOOL_RELEASE);
}

static struct cupool__magazine *by_id(uint32_t id)
{
    struct cupool__magazine **chunk =
        atomic_load_explicit(&chunks[id >> CHUNK_BITS], CUPOOL_ACQUIRE);
    return __atomic_load_n(&chunk[id & (CHUNK_SIZE - 1)], __ATOMIC_ACQUIRE);
}

static struct cupool__magazine *mag_new(void)
{
    if (CUPOOL_UNLIKELY(!atomic_load_explicit(&frozen, CUPOOL_ACQUIRE)))
        pthread_once(&freeze_once, freeze);
    uint32_t id = atomic_fetch_add_explicit(&next_id, 1, CUPOOL_RELAXED);
    uint32_t c = id >> CHUNK_BITS;
    if (c >= MAX_CHUNKS)
        return NULL;
    struct cupool__magazine **chunk = atomic_load_explicit(&chunks[c], CUPOOL_ACQUIRE);
    if (!chunk) {
        struct cupool__magazine **fresh = cupool__alloc(CHUNK_SIZE * sizeof(*fresh));
        if (!fresh)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(&chunks[c], &chunk, fresh, CUPOOL_ACQ_REL,
                                                    CUPOOL_ACQUIRE))
            chunk = fresh;
        else
            cupool__free(fresh, CHUNK_SIZE * sizeof(*fresh));
    }
    struct cupool__magazine *m =
        cupool__alloc(sizeof(*m) + (size_t)cupool__hot.mag_capacity * sizeof(m->items[0]));
    if (!m)
        return NULL; /* the id is burnt; harmless */
    m->id = id;
    /* Read only through a stack head that names this id, after the push that put it there. */
    __atomic_store_n(&chunk[id & (CHUNK_SIZE - 1)], m, __ATOMIC_RELEASE);
    return m;
}

struct cupool__magazine *cupool__mag_get(void)
{
    struct cupool__magazine *m = cupool__stack_pop(&empty_stack);
    return m ? m : mag_new();
}

void cupool__mag_put(struct cupool__magazine *m)
{
    cupool__stack_push(&empty_stack, m);
}

void cupool__stack_push(struct cupool__mag_stack *s, struct cupool__magazine *m)
{
    uint64_t old = atomic_load_explicit(&s->head, CUPOOL_RELAXED);
    for (;;) {
        atomic_store_explicit(&m->next, (uint32_t)old, CUPOOL_RELAXED);
        uint64_t new_head = (((old >> 32) + 1) << 32) | m->id;
        if (atomic_compare_exchange_weak_explicit(&s->head, &old, new_head, CUPOOL_RELEASE,
                                                  CUPOOL_RELAXED))
            return;
    }
}

struct cupool__magazine *cupool__stack_pop(struct cupool__mag_stack *s)
{
    uint64_t old = atomic_load_explicit(&s->head, CUPOOL_ACQUIRE);
    for (;;) {
        uint32_t id = (uint32_t)old;
        if (id == 0)
            return NULL;
        struct cupool__magazine *top = by_id(id);
        /* `top` may be popped and reused by another thread right now; its `next` is then
         * stale, and the generation in `old` makes the CAS below fail. */
        uint32_t next = atomic_load_explicit(&top->next, CUPOOL_RELAXED);
        if (CUPOOL_UNLIKELY(cupool__stack_pop_hook != NULL))
            cupool__stack_pop_hook(s, top);
        uint64_t new_head = (((old >> 32) + 1) << 32) | next;
        if (atomic_compare_exchange_weak_explicit(&s->head, &old, new_head, CUPOOL_ACQ_REL,
                                                  CUPOOL_ACQUIRE))
            return top;
    }
}

uint32_t cupool__mag_allocated(void)
{
    return atomic_load_explicit(&next_id, CUPOOL_RELAXED) - 1;
}

/* SPDX-License-Identifier: MIT */
/* The list of thread records (thread.h). */
#include "base/internal.h"
#include "base/thread.h"

CUPOOL_TLS_IE struct cupool__thread *cupool__self;
static _Atomic(struct cupool__thread *) threads;

struct cupool__thread *cupool__threads(void)
{
    return atomic_load_explicit(&threads, CUPOOL_ACQUIRE);
}

struct cupool__thread *cupool__thread_adopt(void)
{
    for (struct cupool__thread *t = cupool__threads(); t; t = t->next) {
        int idle = 0;
        if (atomic_load_explicit(&t->active, CUPOOL_RELAXED) == 0 &&
            atomic_compare_exchange_strong_explicit(&t->active, &idle, 1, CUPOOL_ACQUIRE,
                                                    CUPOOL_RELAXED))
            return t;
    }
    return NULL;
}

void cupool__thread_push(struct cupool__thread *t)
{
    struct cupool__thread *head = atomic_load_explicit(&threads, CUPOOL_RELAXED);
    do
        t->next = head;
    while (!atomic_compare_exchange_weak_explicit(&threads, &head, t, CUPOOL_RELEASE,
                                                  CUPOOL_RELAXED));
}

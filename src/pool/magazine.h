/* SPDX-License-Identifier: MIT */
/*
 * Magazines and the depot's lock-free stacks (Bonwick & Adams, "Magazines and Vmem", 2001).
 *
 * A magazine is a fixed-capacity array stack of handle records. Each thread keeps two per
 * class (loaded and previous) and touches them without atomics. Whole magazines move between
 * threads through stacks: a class's depot of filled magazines, its retire stack (magazines
 * over the idle cap, waiting to be destroyed), and one global stack of empty magazines.
 *
 * The stacks are Treiber stacks whose head packs a 32-bit magazine id with a 32-bit generation
 * that every successful push or pop increments, so a pop that read a stale `next` cannot
 * succeed after the head went A -> B -> A (ABA) unless exactly 2^32 operations happened in
 * between. Magazines are type-stable: once allocated they are never freed while the library is
 * loaded, so reading a magazine that another thread just popped is always safe.
 * Progress: lock-free (a CAS fails only because another thread's CAS succeeded).
 * Ordering: everything written to a magazine before its push is visible after the pop that
 * returns it (release on push, acquire on pop). Any number of pushers and poppers may run at
 * once.
 */
#ifndef CUPOOL_MAGAZINE_H
#define CUPOOL_MAGAZINE_H
#include "base/internal.h"

struct cupool__handle;

/* A pooled handle: its record, and its value again so a pop hands it out without waiting for
 * a load from the record. */
struct cupool__mag_item {
    struct cupool__handle *rec;
    void *handle;
};

struct cupool__magazine {
    uint32_t id;             /* 1-based, stable: index into the magazine table */
    uint32_t count;          /* items held (0 .. cupool__hot.mag_capacity) */
    _Atomic uint32_t next;   /* id of the next magazine in a stack, 0 = end */
    uint32_t reserved;
    struct cupool__mag_item items[]; /* cupool__hot.mag_capacity slots */
};

struct cupool__mag_stack {
    _Atomic uint64_t head;   /* generation << 32 | magazine id */
};

/* Sets the capacity (count); ignored once a magazine exists (see magazine.c). */
void cupool__mag_init(uint32_t capacity);

/* An empty magazine: from the global empty stack or newly allocated; NULL if out of memory. */
struct cupool__magazine *cupool__mag_get(void);
/* Returns an empty magazine (count must be 0) to the global empty stack. */
void cupool__mag_put(struct cupool__magazine *m);

void cupool__stack_push(struct cupool__mag_stack *s, struct cupool__magazine *m);
/* Pops the top magazine, or NULL when empty. */
struct cupool__magazine *cupool__stack_pop(struct cupool__mag_stack *s);

/* Test hook, NULL outside tests: called inside cupool__stack_pop between reading the top's
 * `next` and the CAS that publishes it, to force the ABA interleaving deterministically. */
extern void (*cupool__stack_pop_hook)(struct cupool__mag_stack *s, struct cupool__magazine *top);

/* Magazines ever allocated (count), for statistics and tests. */
uint32_t cupool__mag_allocated(void);

#endif

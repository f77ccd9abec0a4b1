/* SPDX-License-Identifier: MIT */
/*
 * The base layer's part of a thread's record: the counters that the handshakes of sync.h
 * read on other threads, and the list every record is on. The pool layer's thread cache
 * (struct cupool__tcache, pool/pool.h) begins with it and is the only kind of record there
 * is; the graph layer keeps its per-thread state in that cache.
 */
#ifndef CUPOOL_THREAD_H
#define CUPOOL_THREAD_H
#include "base/internal.h"

/*
 * One thread's record. Type-stable: allocated once, pushed on the list once (lock-free push,
 * never unlinked or freed before unload), owned by one thread at a time and reused by a later
 * thread once `active` is 0 again (claimed by compare-and-swap 0 -> 1).
 * Contract of the counters: each is written only by its owning thread, with a plain store
 * (sync.h: the reader side of an asymmetric handshake), and read by any thread that waits
 * for it to reach zero (cupool__wait_threads) after a barrier on every thread.
 */
struct cupool__thread {
    struct cupool__thread *next; /* the next record on the list (fixed once pushed) */
    _Atomic int active;          /* 1 while a thread owns the record */
    /* Driver calls this thread has in flight (the driver-call guard, base/driver.h): waited
     * for at exit and unload. */
    _Atomic uint32_t in_driver;
    /* This thread's read sections (sync.h): the nesting count in the low bits and, in
     * CUPOOL_RD_PHASE, the grace-period phase its outermost section began in. */
    _Atomic uint32_t in_read;
    /* 1 once this thread has entered a read section with a full fence (cupool__hot.sync_fence),
     * which a grace period needs to know after membarrier(2) stopped working */
    _Atomic uint32_t read_fenced;
    /* Gated sections of graph driver calls in flight (the graph layer's instantiation gate,
     * src/graph/gate.c). */
    _Atomic uint32_t in_launch;
};

/* The calling thread's record, NULL before its first use of cupool (or after its exit). */
extern CUPOOL_TLS_IE struct cupool__thread *cupool__self;

/* The first record of the list (acquire load); follow ->next. Any thread. */
struct cupool__thread *cupool__threads(void);
/* A record of the list that no thread owns, now owned by the caller (active 1), or NULL. */
struct cupool__thread *cupool__thread_adopt(void);
/* Pushes a new record (active already 1) on the list. Lock-free; once per record. */
void cupool__thread_push(struct cupool__thread *t);

#endif

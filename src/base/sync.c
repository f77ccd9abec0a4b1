/* SPDX-License-Identifier: MIT */
/*
 * The handshake's updater side (sync.h): the barrier on every thread (membarrier(2), or a
 * process-wide TLB flush where it is missing), the wait for the readers' counters, and the
 * grace periods of the read sections.
 */
#include "base/internal.h"
#include "base/error.h"
#include "base/sync.h"
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#if defined(SYS_membarrier) && __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#else
#undef SYS_membarrier
#endif

_Atomic uint32_t cupool__read_anon[2];
CUPOOL_TLS_IE uint32_t cupool__read_anon_tl;

static int membarrier_cmd; /* 0: none available */
bool cupool__membarrier_expedited;
bool cupool__readers_fence_since_init;

/* Chooses how the asymmetric handshakes pay for their ordering. Seccomp profiles and some
 * sandboxes deny membarrier(2) (EPERM or ENOSYS): readers then issue a full fence each, as in
 * userspace RCU's memory-barrier flavour, so that every grace period still completes and
 * replaced tables are freed. Before any reader runs: at the first initialisation. */
void cupool__membarrier_register(void)
{
#ifdef SYS_membarrier
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        membarrier_cmd = MEMBARRIER_CMD_PRIVATE_EXPEDITED, cupool__membarrier_expedited = true;
    else if (cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL) &&
             syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
        membarrier_cmd = MEMBARRIER_CMD_GLOBAL;
#endif
    cupool__readers_fence_since_init = membarrier_cmd == 0;
    atomic_store(&cupool__hot.sync_fence, cupool__readers_fence_since_init);
    if (cupool__readers_fence_since_init)
        cupool__log(CUPOOL_LOG_INFO, "membarrier(2) is unavailable: lock-free readers fence "
                                     "themselves (a few ns more per release)");
}

/* A barrier on every thread of the process without membarrier(2): changing the protection of
 * a page of the process makes the kernel flush the TLBs of every CPU running one of its
 * threads, by an interrupt, which serialises each of them (the emulation .NET's runtime uses
 * for FlushProcessWriteBuffers where membarrier is missing). x86 only: elsewhere the flush
 * may be broadcast without interrupting the other CPUs. */
#if defined(__x86_64__) || defined(__i386__)
/* Lock order (docs/design.md, "Locks"): before gp_lock and the allocator's (never held with
 * gp_lock); takes no other. */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static char *flush_page;

static bool process_flush(void)
{
    pthread_mutex_lock(&flush_lock);
    if (!flush_page) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        flush_page = p == MAP_FAILED ? NULL : p;
    }
    bool ok = false;
    if (flush_page) {
        *(volatile char *)flush_page = 1; /* mapped in: its protection change must be flushed */
        ok = mprotect(flush_page, 4096, PROT_READ) == 0 &&
             mprotect(flush_page, 4096, PROT_READ | PROT_WRITE) == 0;
    }
    pthread_mutex_unlock(&flush_lock);
    return ok;
}

static void process_flush_unload(void)
{
    if (flush_page)
        munmap(flush_page, 4096);
    flush_page = NULL;
}
#else
static bool process_flush(void)
{
    return false;
}

static void process_flush_unload(void)
{
}
#endif

bool cupool__membarrier(void)
{
    atomic_thread_fence(memory_order_seq_cst);
#ifdef SYS_membarrier
    static _Atomic bool denied; /* it worked at initialisation and fails now */
    if (membarrier_cmd && !atomic_load_explicit(&denied, CUPOOL_RELAXED)) {
        if (syscall(SYS_membarrier, membarrier_cmd, 0, 0) == 0)
            return true;
        /* a seccomp filter installed after initialisation: readers fence from now on; until
         * each has (or where a process-wide flush works) grace periods wait */
        if (!atomic_exchange(&denied, true)) {
            cupool__membarrier_expedited = false;
            atomic_store(&cupool__hot.sync_fence, true);
            cupool__log(CUPOOL_LOG_INFO, "membarrier(2) failed after initialisation (%s): "
                                         "lock-free readers fence themselves from now on",
                        strerror(errno));
        }
    }
#endif
    return membarrier_cmd != 0 && process_flush();
}

void cupool__sync_unload(void)
{
    process_flush_unload();
}

uint64_t cupool__monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The pause after a look that found a thread still inside: the first 64 spin (the sections
 * waited for are usually microseconds), later ones sleep 20 us. False once past deadline. */
static bool look_again(unsigned looks, uint64_t deadline)
{
    if (looks < 64)
        return true;
    if (cupool__monotonic_ns() > deadline)
        return false;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    return true;
}

static bool wait_zero(_Atomic uint32_t *c, uint64_t deadline)
{
    for (unsigned looks = 0; atomic_load_explicit(c, CUPOOL_ACQUIRE) != 0; looks++)
        if (!look_again(looks, deadline))
            return false;
    return true;
}

bool cupool__wait_threads(size_t field, _Atomic uint32_t *anon, uint64_t timeout_ns)
{
    uint64_t deadline = cupool__monotonic_ns() + timeout_ns;
    struct cupool__thread *self = cupool__self;
    for (struct cupool__thread *tc = cupool__threads(); tc; tc = tc->next)
        if (tc != self && !wait_zero((_Atomic uint32_t *)((char *)tc + field), deadline))
            return false;
    return wait_zero(anon, deadline);
}

_Atomic uint64_t cupool__gp_timeouts;
/* One grace period at a time; held across its wait for readers. Lock order (docs/design.md,
 * "Locks"): after every lock a caller of cupool__synchronize may hold (reclaim_lock, the
 * maintenance unit lock), before the allocator's. */
static pthread_mutex_t gp_lock = PTHREAD_MUTEX_INITIALIZER;

/* Waits until every other thread is outside any read section or inside one begun in the
 * current phase, and no thread without a cache is inside one: up to deadline. */
static bool wait_readers(uint64_t deadline)
{
    uint32_t phase = atomic_load_explicit(&cupool__hot.gp_phase, CUPOOL_RELAXED);
    struct cupool__thread *self = cupool__self;
    for (struct cupool__thread *tc = cupool__threads(); tc; tc = tc->next) {
        if (tc == self)
            continue;
        for (unsigned looks = 0;; looks++) {
            uint32_t v = atomic_load_explicit(&tc->in_read, CUPOOL_ACQUIRE);
            if (!(v & CUPOOL_RD_NEST) || (v & CUPOOL_RD_PHASE) == phase)
                break;
            if (!look_again(looks, deadline))
                return false;
        }
    }
    /* readers without a cache: those counted in the phase that is not the current one */
    return wait_zero(&cupool__read_anon[CUPOOL_RD_IDX(phase ^ CUPOOL_RD_PHASE)], deadline);
}

/* Without a barrier on other threads (membarrier(2) failed after initialisation and no flush
 * works), a grace period needs every live thread to have switched to fencing sections. */
static bool readers_all_fenced(void)
{
    struct cupool__thread *self = cupool__self;
    for (struct cupool__thread *tc = cupool__threads(); tc; tc = tc->next)
        if (tc != self && atomic_load_explicit(&tc->active, CUPOOL_ACQUIRE) &&
            !atomic_load_explicit(&tc->read_fenced, CUPOOL_ACQUIRE))
            return false;
    return true;
}

bool cupool__synchronize(uint64_t timeout_ns)
{
    if (cupool__read_inside())
        return false; /* never inside a read section: see sync.h */
    /* with readers that fence themselves, this thread's own fence completes the handshake */
    if (!cupool__membarrier() &&
        (!atomic_load(&cupool__hot.sync_fence) ||
         (!cupool__readers_fence_since_init && !readers_all_fenced())))
        return false;
    uint64_t deadline = cupool__monotonic_ns() + timeout_ns;
    pthread_mutex_lock(&gp_lock);
    /* sections begun in the phase before the current one end; then the phase flips and the
     * sections of the one that was current end too (urcu's two-phase wait: a reader that read
     * the phase just before a flip is caught by the second wait) */
    bool ok = wait_readers(deadline);
    if (ok) {
        atomic_thread_fence(memory_order_seq_cst);
        atomic_store(&cupool__hot.gp_phase,
                     atomic_load_explicit(&cupool__hot.gp_phase, CUPOOL_RELAXED) ^ CUPOOL_RD_PHASE);
        atomic_thread_fence(memory_order_seq_cst);
        ok = wait_readers(deadline);
    }
    pthread_mutex_unlock(&gp_lock);
    atomic_thread_fence(memory_order_seq_cst);
    if (!ok)
        atomic_fetch_add_explicit(&cupool__gp_timeouts, 1, CUPOOL_RELAXED);
    return ok;
}


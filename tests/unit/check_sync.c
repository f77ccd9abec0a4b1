/* SPDX-License-Identifier: MIT */
/*
 * The one synchronisation primitive (src/base/sync.h), on its own: the asymmetric handshake's
 * readers and updater, and the read sections' grace periods. No driver: the threads here have
 * records of their own (struct cupool__thread) and nothing else of cupool's.
 */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/sync.h"
#include "base/thread.h"

/* A record for the calling thread, on the list (records are never unlinked: a test's records
 * stay listed, idle, for the rest of the process). */
static struct cupool__thread *record_self(void)
{
    struct cupool__thread *t = cupool__thread_adopt();
    if (!t) {
        t = calloc(1, sizeof(*t));
        ck_assert_ptr_nonnull(t);
        atomic_store(&t->active, 1);
        cupool__thread_push(t);
    }
    cupool__self = t;
    return t;
}

static void record_drop(void)
{
    struct cupool__thread *t = cupool__self;
    cupool__self = NULL;
    if (t)
        atomic_store(&t->active, 0);
}

static void setup(void)
{
    cupool__membarrier_register();
    record_self();
}

static void teardown(void)
{
    record_drop();
}

/* ---- the handshake ---- */

static _Atomic int flag;         /* the updater's */
static _Atomic int readers_in;   /* readers past the check of the flag */
static _Atomic int updater_in;   /* the updater past its wait */
static _Atomic long violations;  /* a reader and the updater inside at once */
static _Atomic long reader_rounds, backed_off;
static _Atomic int stop;
static _Atomic int readers_started;

static void *reader(void *arg)
{
    bool frequent = arg != NULL;
    struct cupool__thread *t = record_self();
    atomic_fetch_add(&readers_started, 1);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        if (frequent)
            cupool__hs_enter_frequent(&t->in_launch);
        else
            cupool__hs_enter(&t->in_launch);
        if (!atomic_load_explicit(&flag, memory_order_relaxed)) {
            atomic_fetch_add(&readers_in, 1);
            if (atomic_load(&updater_in))
                atomic_fetch_add(&violations, 1);
            atomic_fetch_sub(&readers_in, 1);
        } else {
            atomic_fetch_add_explicit(&backed_off, 1, memory_order_relaxed);
        }
        cupool__hs_leave(&t->in_launch);
        atomic_fetch_add_explicit(&reader_rounds, 1, memory_order_relaxed);
    }
    record_drop();
    return NULL;
}

/* Readers keep entering; the updater raises its flag, issues the barrier, waits for the
 * readers' counters, and then no reader may be past its check of the flag. */
static void handshake_excludes(bool frequent)
{
    enum { READERS = 3, ROUNDS = 2000 };
    static _Atomic uint32_t anon;
    pthread_t th[READERS];
    atomic_store(&stop, 0);
    atomic_store(&violations, 0);
    atomic_store(&readers_started, 0);
    for (int i = 0; i < READERS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, reader, frequent ? (void *)1 : NULL), 0);
    while (atomic_load(&readers_started) < READERS)
        sched_yield();
    long waited_out = 0;
    for (int r = 0; r < ROUNDS; r++) {
        atomic_store(&flag, 1);
        if (frequent)
            cupool__hs_barrier_frequent();
        else
            (void)cupool__membarrier();
        if (cupool__wait_threads(offsetof(struct cupool__thread, in_launch), &anon,
                                 1000000000u)) {
            atomic_store(&updater_in, 1);
            if (atomic_load(&readers_in) != 0)
                atomic_fetch_add(&violations, 1);
            atomic_store(&updater_in, 0);
        } else {
            waited_out++;
        }
        atomic_store(&flag, 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < READERS; i++)
        pthread_join(th[i], NULL);
    long seen = atomic_load(&violations), rounds = atomic_load(&reader_rounds);
    ck_assert_int_eq(waited_out, 0);
    ck_assert_int_eq(seen, 0); /* a reader inside while the updater was */
    ck_assert_int_gt(rounds, 0);
}

START_TEST(handshake_excludes_readers_from_the_updater)
{
    handshake_excludes(false);
}
END_TEST

START_TEST(frequent_handshake_excludes_readers_from_the_updater)
{
    handshake_excludes(true);
}
END_TEST

static _Atomic int hold_release;

static void *holder(void *arg)
{
    struct cupool__thread *t = record_self();
    cupool__hs_enter(&t->in_launch);
    atomic_store((_Atomic int *)arg, 1);
    while (!atomic_load(&hold_release))
        sched_yield();
    cupool__hs_leave(&t->in_launch);
    record_drop();
    return NULL;
}

/* A reader that stays inside holds the updater's wait until the timeout, which reports it. */
START_TEST(updater_wait_times_out_while_a_reader_stays)
{
    static _Atomic uint32_t anon;
    _Atomic int in = 0;
    pthread_t th;
    atomic_store(&hold_release, 0);
    ck_assert_int_eq(pthread_create(&th, NULL, holder, (void *)&in), 0);
    while (!atomic_load(&in))
        sched_yield();
    (void)cupool__membarrier();
    ck_assert(!cupool__wait_threads(offsetof(struct cupool__thread, in_launch), &anon,
                                    20000000u));
    /* a thread without a record counts in the shared counter, and holds the wait too */
    atomic_store(&hold_release, 1);
    pthread_join(th, NULL);
    cupool__hs_enter_anon(&anon);
    ck_assert(!cupool__wait_threads(offsetof(struct cupool__thread, in_launch), &anon,
                                    20000000u));
    cupool__hs_leave_anon(&anon);
    ck_assert(cupool__wait_threads(offsetof(struct cupool__thread, in_launch), &anon,
                                   1000000000u));
}
END_TEST

/* ---- read sections ---- */

static _Atomic int section_in, section_release;

static void *section_reader(void *arg)
{
    (void)arg;
    struct cupool__thread *t = record_self();
    cupool__read_enter(t);
    cupool__read_enter(t); /* nested */
    cupool__read_leave(t);
    atomic_store(&section_in, 1);
    while (!atomic_load(&section_release))
        sched_yield();
    cupool__read_leave(t);
    record_drop();
    return NULL;
}

static void *anon_section_reader(void *arg)
{
    (void)arg;
    cupool__read_enter(NULL);
    atomic_store(&section_in, 1);
    while (!atomic_load(&section_release))
        sched_yield();
    cupool__read_leave(NULL);
    return NULL;
}

/* A grace period waits for a section that began before it: it times out while the section
 * lasts (nested or not, with or without a record) and completes once it ends. */
static void grace_period_waits_for(void *(*fn)(void *))
{
    pthread_t th;
    atomic_store(&section_in, 0);
    atomic_store(&section_release, 0);
    ck_assert_int_eq(pthread_create(&th, NULL, fn, NULL), 0);
    while (!atomic_load(&section_in))
        sched_yield();
    uint64_t before = atomic_load(&cupool__gp_timeouts);
    ck_assert(!cupool__synchronize(20000000u));
    uint64_t after = atomic_load(&cupool__gp_timeouts);
    ck_assert_uint_eq(after, before + 1);
    atomic_store(&section_release, 1);
    pthread_join(th, NULL);
    ck_assert(cupool__synchronize(1000000000u));
}

START_TEST(grace_period_waits_for_a_section)
{
    grace_period_waits_for(section_reader);
}
END_TEST

START_TEST(grace_period_waits_for_a_section_without_a_record)
{
    grace_period_waits_for(anon_section_reader);
}
END_TEST

static void *section_churner(void *arg)
{
    (void)arg;
    struct cupool__thread *t = record_self();
    atomic_store(&section_in, 1);
    while (!atomic_load(&section_release)) {
        cupool__read_enter(t);
        cupool__read_leave(t);
    }
    record_drop();
    return NULL;
}

/* A thread that keeps entering short sections never holds a grace period up: each of its
 * sections after the phase flip begins in the new phase. */
START_TEST(grace_periods_complete_beside_a_churning_reader)
{
    pthread_t th;
    atomic_store(&section_in, 0);
    atomic_store(&section_release, 0);
    ck_assert_int_eq(pthread_create(&th, NULL, section_churner, NULL), 0);
    while (!atomic_load(&section_in))
        sched_yield();
    for (int i = 0; i < 200; i++)
        ck_assert(cupool__synchronize(1000000000u));
    atomic_store(&section_release, 1);
    pthread_join(th, NULL);
}
END_TEST

/* An updater inside a section of its own is refused at once (it would wait for itself). */
START_TEST(synchronize_refuses_inside_a_section)
{
    struct cupool__thread *t = cupool__self;
    ck_assert(!cupool__read_inside());
    cupool__read_enter(t);
    ck_assert(cupool__read_inside());
    ck_assert(!cupool__synchronize(1000000000u));
    cupool__read_leave(t);
    ck_assert(!cupool__read_inside());
    ck_assert(cupool__synchronize(1000000000u));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sync");
    TCase *tc = tcase_create("handshake");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, handshake_excludes_readers_from_the_updater);
    tcase_add_test(tc, frequent_handshake_excludes_readers_from_the_updater);
    tcase_add_test(tc, updater_wait_times_out_while_a_reader_stays);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("read sections");
    tcase_add_checked_fixture(tr, setup, teardown);
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, grace_period_waits_for_a_section);
    tcase_add_test(tr, grace_period_waits_for_a_section_without_a_record);
    tcase_add_test(tr, grace_periods_complete_beside_a_churning_reader);
    tcase_add_test(tr, synchronize_refuses_inside_a_section);
    suite_add_tcase(s, tr);
    return tu_run(s);
}

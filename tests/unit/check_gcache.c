/* SPDX-License-Identifier: MIT */
/*
 * The graph cache's bookkeeping (src/graph/cache.c, graveyard.c, launch.c), reached through
 * the graph layer's internal interface: which entry the bound evicts (least recently
 * launched), the epoch an eviction moves on (so no thread's hint claims an entry without the
 * lock afterwards), and the graveyard that keeps an evicted exec whose launch still runs.
 */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"
#include <stdlib.h>
#include <time.h>

#include "graph/graph_impl.h"
#include "graph/graveyard.h"
#include "pool/maint.h"

static struct tu_pipeline_fixture fx;

static void setup(void)
{
    setenv("CUPOOL_GRAPH_CACHE_ENTRIES", "3", 1);
    tu_pipeline_begin(&fx, 64);
}

static void teardown(void)
{
    tu_pipeline_end(&fx);
}

/* A pipeline of `n` add_u32 kernels: n is its structure. */
static cupool_pipeline_t pipeline_of(int n)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int i = 0; i < n; i++) {
        unsigned v = 1;
        void *args[] = {&fx.mem, &v};
        TU_OK(cupool_pipeline_kernel(p, fx.k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
    return p;
}

/* Whether the cache holds the entry of p's last launch. */
static bool cached(cupool_pipeline_t pl)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pl);
    pthread_mutex_lock(&cupool__cache_lock);
    struct gentry *e = cupool__lookup(p->last_hash, p->last_ctx_id, p->sig, p->last_nsig);
    pthread_mutex_unlock(&cupool__cache_lock);
    return e != NULL;
}

static cupool_graph_stats_t gstats(void)
{
    cupool_graph_stats_t st = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&st));
    return st;
}

START_TEST(the_bound_evicts_the_least_recently_launched)
{
    cupool_pipeline_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = pipeline_of(i + 1);
    for (int i = 0; i < 3; i++)
        TU_OK(cupool_pipeline_launch(p[i], fx.s));
    TU_OK(cupool_pipeline_launch(p[0], fx.s)); /* p[1] is now the least recently launched */
    TU_OK(tu.cuStreamSynchronize(fx.s));
    uint64_t epoch = atomic_load(&cupool__cache_epoch.v);
    uint64_t evicted = gstats().evictions;
    TU_OK(cupool_pipeline_launch(p[3], fx.s));
    ck_assert_uint_eq(gstats().evictions, evicted + 1);
    ck_assert(cached(p[0]));
    ck_assert(!cached(p[1]));
    ck_assert(cached(p[2]));
    ck_assert(cached(p[3]));
    /* the eviction moved the epoch on */
    ck_assert_uint_gt(atomic_load(&cupool__cache_epoch.v), epoch);
    TU_OK(tu.cuStreamSynchronize(fx.s));
    for (int i = 0; i < 4; i++)
        cupool_pipeline_destroy(p[i]);
}
END_TEST

/* A repeat launch claims its exec without the lock; once an eviction moved the epoch on, the
 * thread's hint is not trusted: the next launch takes the lock, and the one after is
 * lock-free again. */
START_TEST(an_eviction_makes_the_next_claim_take_the_lock)
{
    cupool_pipeline_t a = pipeline_of(1), b = pipeline_of(2), c = pipeline_of(3),
                      d = pipeline_of(4);
    TU_OK(cupool_pipeline_launch(a, fx.s));
    TU_OK(cupool_pipeline_launch(a, fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    cupool_graph_stats_t st0 = gstats();
    TU_OK(cupool_pipeline_launch(a, fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    cupool_graph_stats_t st1 = gstats();
    ck_assert_uint_eq(st1.claims_lock_free, st0.claims_lock_free + 1);
    TU_OK(cupool_pipeline_launch(b, fx.s));
    TU_OK(cupool_pipeline_launch(c, fx.s));
    TU_OK(cupool_pipeline_launch(a, fx.s)); /* a stays the most recent of the three */
    TU_OK(cupool_pipeline_launch(d, fx.s)); /* evicts b: the epoch moves */
    TU_OK(tu.cuStreamSynchronize(fx.s));
    ck_assert(cached(a));
    cupool_graph_stats_t st2 = gstats();
    TU_OK(cupool_pipeline_launch(a, fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    cupool_graph_stats_t st3 = gstats();
    ck_assert_uint_eq(st3.claims_locked, st2.claims_locked + 1);
    ck_assert_uint_eq(st3.claims_lock_free, st2.claims_lock_free);
    TU_OK(cupool_pipeline_launch(a, fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    ck_assert_uint_eq(gstats().claims_lock_free, st3.claims_lock_free + 1);
    cupool_pipeline_destroy(a);
    cupool_pipeline_destroy(b);
    cupool_pipeline_destroy(c);
    cupool_pipeline_destroy(d);
}
END_TEST

/* An exec evicted while its launch still runs waits in the graveyard, and is destroyed once
 * the launch has finished. */
START_TEST(an_evicted_running_exec_waits_in_the_graveyard)
{
    ck_assert_msg(tu_fake.present, "simulated driver expected");
    cupool_pipeline_t spin;
    TU_OK(cupool_pipeline_create(&spin));
    unsigned long long ns = 300000000; /* 300 ms: longer than the three launches that evict it */
    void *args[] = {&ns};
    TU_OK(cupool_pipeline_kernel(spin, fx.k.spin, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    unsigned long destroy_waits = tu_fake.exec_destroy_waits();
    TU_OK(cupool_pipeline_launch(spin, fx.s));
    int execs_running = tu_fake.live_execs();
    /* three other structures on another stream evict the spinning one */
    CUstream s2;
    TU_OK(tu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    cupool_pipeline_t p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = pipeline_of(i + 1);
        TU_OK(cupool_pipeline_launch(p[i], s2));
    }
    ck_assert(!cached(spin));
    /* its exec is not destroyed under the running launch: while the launch still runs (a
     * slowed machine may have let it finish, and the grave be reaped), it is buried */
    bool running = tu.cuStreamQuery(fx.s) == CUDA_ERROR_NOT_READY;
    if (running) /* still alive, in the graveyard (counted due there or not) */
        ck_assert_int_ge(tu_fake.live_execs(), execs_running);
    TU_OK(tu.cuStreamSynchronize(fx.s));
    TU_OK(tu.cuStreamSynchronize(s2));
    TU_OK(cupool_trim()); /* reaps what has finished, and drops every idle entry */
    int graves = atomic_load(&cupool__graves_due);
    ck_assert_int_eq(graves, 0);
    ck_assert_int_eq(tu_fake.live_execs(), 0);
    /* no exec was destroyed while a launch of it was queued */
    ck_assert_uint_eq(tu_fake.exec_destroy_waits(), destroy_waits);
    cupool_pipeline_destroy(spin);
    for (int i = 0; i < 3; i++)
        cupool_pipeline_destroy(p[i]);
    TU_OK(tu.cuStreamDestroy(s2));
}
END_TEST

/* A grave the maintenance thread cannot see the end of (an exec evicted with no completion
 * event recorded: it waits for a trim, or for more such graves) does not keep the thread
 * looking at the graveyard every millisecond once the graves it can see the end of are gone.
 * It did: one such grave kept an idle process's maintenance thread waking 1000 times a
 * second for as long as it lived. */
START_TEST(a_grave_without_an_event_leaves_the_thread_asleep)
{
    ck_assert_msg(tu_fake.present, "simulated driver expected");
    /* the one-stream entry of `blind`, evicted by three others: its template graph is buried
     * ready to go (the launch that evicted it kicks the thread to watch the graveyard), its
     * exec without a completion event (nothing says when its launch ends) */
    cupool_pipeline_t blind = pipeline_of(1), p[3];
    TU_OK(cupool_pipeline_launch(blind, fx.s));
    int live = tu_fake.live_execs();
    for (int i = 0; i < 3; i++) {
        p[i] = pipeline_of(i + 2);
        TU_OK(cupool_pipeline_launch(p[i], fx.s));
    }
    ck_assert(!cached(blind));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    ck_assert(cupool__maint_flush(10ull * 1000000000ull));
    ck_assert(cupool__maint_flush(10ull * 1000000000ull)); /* a round after the reap */
    ck_assert_int_eq(atomic_load(&cupool__graves_due), 0);
    ck_assert_int_ge(tu_fake.live_execs(), live + 3); /* blind's exec waits, buried */
    ck_assert_msg(!cupool__maint_graves_polling(),
                  "the maintenance thread keeps looking at a grave it cannot see the end of");
    TU_OK(cupool_trim()); /* destroys it */
    ck_assert_int_eq(tu_fake.live_execs(), 0);
    cupool_pipeline_destroy(blind);
    for (int i = 0; i < 3; i++)
        cupool_pipeline_destroy(p[i]);
}
END_TEST

/* The graveyard's watch and the launch that kicks the thread: however the thread's round
 * falls against that launch, a grave buried later is reaped without anyone asking. The kick
 * used to be followed by the store of the watch: a whole round of the thread in between (the
 * reap, the watch cleared) left the watch on with nobody watching, and from then on no launch
 * kicked the thread and no grave was reaped again. The hook below makes that round happen
 * between the kick and the launch's return. */
static uint64_t reaps_before;
static void wait_for_a_whole_round(void)
{
    for (int i = 0; i < 10000; i++) { /* at most 10 s */
        cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
        TU_OK(cupool_maintenance_stats_get(&m));
        if (m.graph_reaps != reaps_before && !atomic_load(&cupool__graves_watched) &&
            atomic_load(&cupool__graves_due) == 0)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

START_TEST(a_grave_after_a_kick_is_reaped_however_the_round_falls)
{
    cupool_pipeline_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = pipeline_of(i + 1);
    for (int i = 0; i < 3; i++) /* the cache's three entries */
        TU_OK(cupool_pipeline_launch(p[i], fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    ck_assert(cupool__maint_flush(10ull * 1000000000ull)); /* the thread runs, idle */
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    TU_OK(cupool_maintenance_stats_get(&m));
    reaps_before = m.graph_reaps;
    /* p[3] evicts an entry and buries its template, ready: the launch kicks the thread, which
     * reaps it and clears the watch before the launch returns */
    cupool__graves_kicked_hook = wait_for_a_whole_round;
    TU_OK(cupool_pipeline_launch(p[3], fx.s));
    cupool__graves_kicked_hook = NULL;
    /* p[0] evicts another: its grave must be reaped with no further help */
    TU_OK(cupool_pipeline_launch(p[0], fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    int due = 1;
    for (int i = 0; i < 10000 && (due = atomic_load(&cupool__graves_due)) > 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(due == 0, "a grave waits with the watch on (%d) and nobody watching",
                  (int)atomic_load(&cupool__graves_watched));
    for (int i = 0; i < 4; i++)
        cupool_pipeline_destroy(p[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("graph cache");
    TCase *tc = tcase_create("cache");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_bound_evicts_the_least_recently_launched);
    tcase_add_test(tc, an_eviction_makes_the_next_claim_take_the_lock);
    tcase_add_test(tc, an_evicted_running_exec_waits_in_the_graveyard);
    tcase_add_test(tc, a_grave_without_an_event_leaves_the_thread_asleep);
    tcase_add_test(tc, a_grave_after_a_kick_is_reaped_however_the_round_falls);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

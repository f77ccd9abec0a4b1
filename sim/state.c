/* SPDX-License-Identifier: MIT */
/* The simulated driver's global state, its lock, its abort message, time, and the slab
 * allocator of handles. */
#include "internal.h"

/* ========================================================================================
 * Global state
 * ======================================================================================== */

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;

int g_env_read;
int g_stub;                               /* FAKECUDA_STUB=1 */
int g_driver_version = FC_DRIVER_VERSION; /* FAKECUDA_DRIVER_VERSION */
char g_hidden[512];                       /* FAKECUDA_HIDE, as ",name,name," */
int g_initialized;
int g_fork_child;
int g_torn_down;
int g_strict;
int g_handlers_registered;
int g_ndev;
struct fc_ctx *g_primary[FC_MAX_DEVICES];
struct fc_ctx *g_contexts; /* every context ever made */
unsigned long long g_next_ctx_id = 1;
unsigned long long g_next_stream_id = 1;
unsigned long long g_next_capture_id = 1;
uint64_t g_seq; /* last operation sequence number */
int g_live_streams, g_live_events;

struct fc_pool g_ctx_pool = {"context", sizeof(struct fc_ctx), MAGIC_CTX, 0, SIZE_MAX,
                             {0}, {0}, 0, 0, NULL, NULL, 0};
struct fc_pool g_stream_pool = {"stream", sizeof(struct fc_stream), MAGIC_STREAM, 1, 0,
                                {0}, {0}, 0, 0, NULL, NULL, 0};
struct fc_pool g_event_pool = {"event", sizeof(struct fc_event), MAGIC_EVENT, 0,
                               FC_EVENT_HOLDBACK, {0}, {0}, 0, 0, NULL, NULL, 0};
struct fc_pool g_module_pool = {"module", sizeof(struct fc_module), MAGIC_MODULE, 0, 64,
                                {0}, {0}, 0, 0, NULL, NULL, 0};

/* per thread: the context stack, the entry point being run (for messages), the context
 * whose operation this thread is executing (for the builtin kernels) */
_Thread_local struct fc_ctx *tl_stack[FC_CTX_STACK];
_Thread_local int tl_depth;
_Thread_local const char *tl_entry = "fakecuda";
_Thread_local struct fc_ctx *tl_exec_ctx;
_Thread_local unsigned tl_cluster_x; /* cluster width of the kernel running (1: none) */
_Thread_local const struct fc_op *tl_op; /* the kernel running on this thread */
_Thread_local char tl_token;

/* Prints `fakecuda: <entry>: <what> (the real driver crashes here)` and aborts. */
void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fakecuda: %s: ", tl_entry);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (the real driver crashes here)\n");
    abort();
}

/* ========================================================================================
 * Time
 * ======================================================================================== */

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
    while (now_ns() < t && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ========================================================================================
 * Handle pools
 * ======================================================================================== */

_Atomic size_t slab_bytes; /* all handle tables' slabs (bytes); they never shrink */

/* A zeroed element (header set, state LIVE), or NULL when out of memory. */
void *pool_get(struct fc_pool *p)
{
    struct fc_hdr *h;
    if (p->free_head && (p->lifo || p->nfree > p->holdback)) {
        h = p->free_head;
        p->free_head = h->free_next;
        if (!p->free_head)
            p->free_tail = NULL;
        p->nfree--;
    } else {
        if (p->nslabs == 0 || p->used == p->slab_len[p->nslabs - 1]) {
            if (p->nslabs == FC_MAX_SLABS)
                return NULL;
            size_t n = (size_t)64 << (p->nslabs < 16 ? p->nslabs : 16);
            char *s = calloc(n, p->size);
            if (!s)
                return NULL;
            slab_bytes += n * p->size;
            p->slab[p->nslabs] = s;
            p->slab_len[p->nslabs] = n;
            p->nslabs++;
            p->used = 0;
        }
        h = (struct fc_hdr *)(void *)(p->slab[p->nslabs - 1] + p->used * p->size);
        p->used++;
    }
    memset((char *)h + sizeof *h, 0, p->size - sizeof *h);
    h->magic = p->magic;
    h->state = ST_LIVE;
    h->free_next = NULL;
    return h;
}

/* Marks the element dead (state) and queues it for reuse. */
void pool_put(struct fc_pool *p, void *obj, uint32_t state)
{
    struct fc_hdr *h = obj;
    h->state = state;
    h->free_next = NULL;
    if (p->lifo) {
        h->free_next = p->free_head;
        p->free_head = h;
        if (!p->free_tail)
            p->free_tail = h;
    } else {
        if (p->free_tail)
            p->free_tail->free_next = h;
        else
            p->free_head = h;
        p->free_tail = h;
    }
    p->nfree++;
}

/* The element of p whose memory contains ptr (any byte of it), or NULL. Never dereferences
 * ptr outside the slabs. */
struct fc_hdr *pool_container(const struct fc_pool *p, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    for (int i = 0; i < p->nslabs; i++) {
        uintptr_t base = (uintptr_t)p->slab[i];
        size_t n = i == p->nslabs - 1 ? p->used : p->slab_len[i];
        if (a >= base && a < base + n * p->size) {
            size_t idx = (a - base) / p->size;
            struct fc_hdr *h = (struct fc_hdr *)(void *)(p->slab[i] + idx * p->size);
            return h->magic == p->magic ? h : NULL;
        }
    }
    return NULL;
}

/* ptr is exactly an element of p */
int pool_owns(const struct fc_pool *p, const void *ptr)
{
    return ptr && pool_container(p, ptr) == ptr;
}

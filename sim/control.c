/* SPDX-License-Identifier: MIT */
/* Call counters, fault injection and the prologue of every entry point; the control API of
 * fakecuda.h. */
#include "internal.h"

/* ========================================================================================
 * Entry points: names, call counters, fault injection, common prologue
 * ======================================================================================== */
#define FC_NAME(n, v, f) #n,
static const char *const g_entry_names[E_COUNT] = {FC_ENTRIES(FC_NAME, FC_NONE)};

static unsigned long g_calls[E_COUNT];
static __thread unsigned long tl_calls[E_COUNT]; /* the calling thread's own */
static unsigned long g_calls_total;
static unsigned long g_calls_after_teardown;
static struct fc_fault g_fault[E_COUNT];
static struct fc_fault g_fault_all;

/* Entry index for a base name; "cuStreamDestroy_v2" and "_ptsz"/"_ptds" forms are accepted. */
static int entry_index(const char *name)
{
    static const char *const suffixes[] = {"", "_v2", "_v3", "_v4", "_ptsz", "_ptds"};
    if (!name)
        return -1;
    for (int i = 0; i < E_COUNT; i++) {
        size_t n = strlen(g_entry_names[i]);
        if (strncmp(name, g_entry_names[i], n) != 0)
            continue;
        for (size_t s = 0; s < sizeof suffixes / sizeof suffixes[0]; s++)
            if (strcmp(name + n, suffixes[s]) == 0)
                return i;
    }
    return -1;
}

/* One step of a fault: 1 (and *err) when this call fails. */
static int fault_step(struct fc_fault *f, CUresult *err)
{
    if (!f->active)
        return 0;
    if (f->skip > 0) {
        f->skip--;
        return 0;
    }
    if (f->count == 0) {
        f->active = 0;
        return 0;
    }
    if (f->count > 0 && --f->count == 0)
        f->active = 0;
    *err = f->err;
    return 1;
}

/* The failure modes the environment asks for (read once, at the first call). */
static void read_env(void)
{
    const char *v;
    g_env_read = 1;
    v = getenv("FAKECUDA_STUB");
    g_stub = v && strcmp(v, "1") == 0;
    v = getenv("FAKECUDA_DRIVER_VERSION");
    if (v && *v)
        g_driver_version = atoi(v);
    v = getenv("FAKECUDA_HIDE");
    if (v && *v && strlen(v) + 3 <= sizeof g_hidden) {
        snprintf(g_hidden, sizeof g_hidden, ",%s,", v);
        for (char *p = g_hidden; *p; p++)
            if (*p == ' ' || *p == ':' || *p == ';')
                *p = ',';
    }
}

/*
 * Prologue of every entry point: counts the call, then refuses it when acting as a stub
 * library, after teardown, in a forked child or before cuInit (need_init), or by an injected
 * fault. Returns 1 with the global lock held when the call proceeds, else 0 with *early set
 * and the lock released.
 */
int enter(int e, int need_init, CUresult *early)
{
    lock();
    g_calls[e]++;
    tl_calls[e]++;
    g_calls_total++;
    tl_entry = g_entry_names[e];
    if (!g_env_read)
        read_env();
    if (g_stub) {
        *early = CUDA_ERROR_STUB_LIBRARY; /* what the toolkit's stub libcuda returns */
    } else if (g_torn_down) {
        g_calls_after_teardown++;
        if (g_strict) {
            fprintf(stderr, "fakecuda: %s called after driver teardown\n", g_entry_names[e]);
            abort();
        }
        *early = CUDA_ERROR_DEINITIALIZED;
    } else if (need_init && (g_fork_child || !g_initialized)) {
        *early = CUDA_ERROR_NOT_INITIALIZED;
    } else if (fault_step(&g_fault[e], early) || fault_step(&g_fault_all, early)) {
        /* *early set */
    } else {
        return 1;
    }
    unlock();
    return 0;
}

CUresult leave(CUresult r)
{
    unlock();
    return r;
}

/* ========================================================================================
 * Control API (fakecuda.h): not entry points, never counted or refused
 * ======================================================================================== */

int fakecuda_live_streams(void)
{
    lock();
    int n = g_live_streams;
    unlock();
    return n;
}

int fakecuda_live_events(void)
{
    lock();
    int n = g_live_events;
    unlock();
    return n;
}

unsigned long fakecuda_calls(const char *entry)
{
    int i = entry_index(entry);
    lock();
    unsigned long n = i >= 0 ? g_calls[i] : 0;
    unlock();
    return n;
}

unsigned long fakecuda_calls_here(const char *entry)
{
    int i = entry_index(entry);
    return i >= 0 ? tl_calls[i] : 0;
}

unsigned long fakecuda_calls_total(void)
{
    lock();
    unsigned long n = g_calls_total;
    unlock();
    return n;
}

void fakecuda_reset_counters(void)
{
    lock();
    memset(g_calls, 0, sizeof g_calls);
    g_calls_total = 0;
    g_calls_after_teardown = 0;
    unlock();
}

void fakecuda_fault(const char *entry, unsigned long skip, long count, CUresult err)
{
    int all = entry && strcmp(entry, "*") == 0;
    int i = all ? -1 : entry_index(entry);
    if (!all && i < 0) {
        fprintf(stderr, "fakecuda: fakecuda_fault: unknown entry point '%s' ignored\n",
                entry ? entry : "(null)");
        return;
    }
    lock();
    struct fc_fault *f = all ? &g_fault_all : &g_fault[i];
    f->active = count != 0;
    f->skip = skip;
    f->count = count < 0 ? -1 : count;
    f->err = err;
    unlock();
}

void fakecuda_fault_clear(void)
{
    lock();
    memset(g_fault, 0, sizeof g_fault);
    memset(&g_fault_all, 0, sizeof g_fault_all);
    unlock();
}

void fakecuda_teardown(void)
{
    lock();
    g_torn_down = 1;
    unlock();
}

void fakecuda_set_strict_teardown(int on)
{
    lock();
    g_strict = on != 0;
    unlock();
}

unsigned long fakecuda_calls_after_teardown(void)
{
    lock();
    unsigned long n = g_calls_after_teardown;
    unlock();
    return n;
}

void fakecuda_poison_context(CUcontext ctx, CUresult err)
{
    lock();
    struct fc_ctx *c = ctx ? (struct fc_ctx *)ctx : tl_top();
    if (c && pool_owns(&g_ctx_pool, c))
        poison(c, err);
    else if (c)
        fprintf(stderr, "fakecuda: fakecuda_poison_context: %p is not a context\n", (void *)ctx);
    unlock();
}

int fakecuda_register_kernel(const char *name, int nparams, const size_t *param_sizes,
                             fakecuda_kernel_fn fn)
{
    if (!name || !*name || strlen(name) >= FC_NAME_MAX || !fn || nparams < 0 ||
        nparams > FC_MAX_PARAMS || (nparams > 0 && !param_sizes))
        return -1;
    for (int i = 0; i < nparams; i++)
        if (param_sizes[i] == 0 || param_sizes[i] > FC_MAX_PARAM_SIZE)
            return -1;
    lock();
    int slot = kernel_find(name);
    if (slot < 0) {
        if (g_nkernels == FC_MAX_KERNELS) {
            unlock();
            return -1;
        }
        slot = g_nkernels++;
    }
    struct fc_kernel *k = &g_kernels[slot];
    memset(k, 0, sizeof *k);
    memcpy(k->name, name, strlen(name) + 1);
    k->nparams = nparams;
    for (int i = 0; i < nparams; i++)
        k->sizes[i] = param_sizes[i];
    k->fn = fn;
    unlock();
    return 0;
}

unsigned long fakecuda_exec_destroy_waits(void)
{
    lock();
    unsigned long n = g_exec_destroy_waits;
    unlock();
    return n;
}

int fakecuda_live_execs(void)
{
    return atomic_load(&g_live_execs);
}

int fakecuda_live_graphs(void)
{
    return atomic_load(&g_live_graphs);
}

unsigned long fakecuda_instantiations_of_launched_graphs(void)
{
    return atomic_load(&g_inst_of_launched);
}

unsigned long fakecuda_instantiate_launch_overlaps(void)
{
    return atomic_load(&g_inst_launch_overlaps);
}

unsigned long fakecuda_exec_overlaps(void)
{
    lock();
    unsigned long n = g_exec_overlaps;
    unlock();
    return n;
}

size_t fakecuda_slab_bytes(void)
{
    return slab_bytes;
}

unsigned long fakecuda_graph_uploads(void)
{
    return atomic_load(&g_uploads);
}

unsigned long fakecuda_graph_launch_uploads(void)
{
    return atomic_load(&g_launch_uploads);
}

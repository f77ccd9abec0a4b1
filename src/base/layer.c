/* SPDX-License-Identifier: MIT */
/* The table of the layers' hooks (layer.h). */
#include "base/internal.h"
#include "base/layer.h"

#include <pthread.h>

#define MAX_RANK CUPOOL_LAYER_DROPIN
static const struct cupool__layer *layers[MAX_RANK + 1]; /* by rank */
struct cupool__driver_hooks cupool__driver_hooks;
/* Whether cupool__layers_init() ran: a layer registered after it (its constructor ran after
 * a constructor of the program's that initialised cupool, as in a static executable) gets its
 * init hook at registration. layer_lock serialises the two; it is taken under init_lock and
 * takes no other lock (docs/design.md, "Locks"). */
static pthread_mutex_t layer_lock = PTHREAD_MUTEX_INITIALIZER;
static bool inited;

void cupool__layer_register(const struct cupool__layer *layer)
{
    if (!layer || layer->rank < 1 || layer->rank > MAX_RANK)
        return;
    pthread_mutex_lock(&layer_lock);
    layers[layer->rank] = layer;
    if (inited && layer->init)
        layer->init();
    pthread_mutex_unlock(&layer_lock);
}

#define WALK(hook, args)                                                                    \
    for (int r = 1; r <= MAX_RANK; r++)                                                     \
        if (layers[r] && layers[r]->hook)                                                   \
            layers[r]->hook args;

void cupool__layers_init(void)
{
    pthread_mutex_lock(&layer_lock);
    WALK(init, ())
    inited = true;
    pthread_mutex_unlock(&layer_lock);
}

void cupool__layers_close(bool all_threads)
{
    WALK(close, (all_threads))
}

void cupool__layers_stop(bool join)
{
    WALK(stop, (join))
}

void cupool__layers_unload(void)
{
    WALK(unload, ())
}

void cupool__layers_forked(void)
{
    WALK(forked, ())
}

void cupool__layers_trim(void)
{
    WALK(trim, ())
}

void cupool__layers_report(FILE *out)
{
    WALK(report, (out))
}

bool cupool__layers_maintain(void)
{
    bool more = false;
    for (int r = 1; r <= MAX_RANK; r++)
        if (layers[r] && layers[r]->maintain && layers[r]->maintain())
            more = true;
    return more;
}

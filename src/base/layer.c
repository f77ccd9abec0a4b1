/* SPDX-License-Identifier: MIT */
/* The table of the layers' hooks (layer.h). */
#include "base/internal.h"
#include "base/layer.h"

#define MAX_RANK CUPOOL_LAYER_DROPIN
static const struct cupool__layer *layers[MAX_RANK + 1]; /* by rank; filled before main */
struct cupool__driver_hooks cupool__driver_hooks;

void cupool__layer_register(const struct cupool__layer *layer)
{
    if (layer && layer->rank >= 1 && layer->rank <= MAX_RANK)
        layers[layer->rank] = layer;
}

#define WALK(hook, args)                                                                    \
    for (int r = 1; r <= MAX_RANK; r++)                                                     \
        if (layers[r] && layers[r]->hook)                                                   \
            layers[r]->hook args;

void cupool__layers_init(void)
{
    WALK(init, ())
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

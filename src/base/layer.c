/* SPDX-License-Identifier: MIT */
/* The table of the layers' hooks (layer.h). */
#include "base/internal.h"
#include "base/layer.h"

#include <inttypes.h>
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

CUresult cupool__layers_report(FILE *out, cupool_stats_format_t format)
{
    for (int r = 1; r <= MAX_RANK; r++) {
        if (!layers[r] || !layers[r]->report)
            continue;
        CUresult res = layers[r]->report(out, format);
        if (res != CUDA_SUCCESS)
            return res;
    }
    if (format == CUPOOL_STATS_FORMAT_JSON)
        fputs("}\n", out);
    return CUDA_SUCCESS;
}

void cupool__json_string(FILE *out, const char *s)
{
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            putc('\\', out);
            putc(*p, out);
        } else if (*p < 0x20 || *p >= 0x7f) {
            fprintf(out, "\\u%04x", *p);
        } else {
            putc(*p, out);
        }
    }
    putc('"', out);
}

void cupool__prom_metric(FILE *out, const char *name, const char *type, const char *help,
                         uint64_t value)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name,
            value);
}

bool cupool__layers_maintain(void)
{
    bool more = false;
    for (int r = 1; r <= MAX_RANK; r++)
        if (layers[r] && layers[r]->maintain && layers[r]->maintain())
            more = true;
    return more;
}

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

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, surrogates or
 * code points past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p)
{
    unsigned char c = p[0];
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!n)
        return 0;
    unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

void cupool__json_string(FILE *out, const char *s)
{
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            putc('\\', out);
            putc(*p, out);
        } else if (*p < 0x20 || *p == 0x7f) {
            fprintf(out, "\\u%04x", *p);
        } else if (*p < 0x80) {
            putc(*p, out);
        } else {
            /* a UTF-8 character as its code point (a surrogate pair past U+FFFF), so the
             * document stays ASCII; a byte that is none (a path in another encoding) as
             * U+FFFD */
            size_t n = utf8_len(p);
            if (!n) {
                fputs("\\ufffd", out);
                continue;
            }
            uint32_t cp = *p & (0x7f >> n);
            for (size_t i = 1; i < n; i++)
                cp = cp << 6 | (p[i] & 0x3f);
            p += n - 1;
            if (cp < 0x10000)
                fprintf(out, "\\u%04x", (unsigned)cp);
            else
                fprintf(out, "\\u%04x\\u%04x", (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
                        (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
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

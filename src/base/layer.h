/* SPDX-License-Identifier: MIT */
/*
 * The layers above base (pool, graph, the preload) hook into what base drives: the library's
 * initialisation, exit, unload and fork, cupool_trim, the statistics and the maintenance
 * thread's rounds. Each registers its hooks from a constructor of its own, so base and the
 * layers below never call up by name (docs/design.md, "Layout").
 * Contract: registration happens in constructors, before any hook of that layer is needed
 * (its code cannot run before its own constructor, but another constructor may initialise
 * cupool first: a layer registered after initialisation gets its init hook at once). The
 * walks other than init take no lock: a slot is written once, a pointer store. Hooks run on
 * the thread that calls the walk, in rank order.
 */
#ifndef CUPOOL_LAYER_H
#define CUPOOL_LAYER_H
#include "base/internal.h"
#include <stdio.h>

enum cupool__layer_rank { CUPOOL_LAYER_POOL = 1, CUPOOL_LAYER_GRAPH = 2, CUPOOL_LAYER_DROPIN = 3 };

/* A layer's hooks; any may be NULL. */
struct cupool__layer {
    enum cupool__layer_rank rank;
    /* at the first initialisation attempt, after the configuration is read; or at
     * registration, when that came later */
    void (*init)(void);
    /* destroy what is idle while the driver still answers; the calling thread is the closer
     * (cupool__closer). all_threads: unload (no thread may be inside the library); else exit */
    void (*close)(bool all_threads);
    /* background threads stop calling the driver (exit: not joined; unload: joined) */
    void (*stop)(bool join);
    /* the library is being unloaded: nothing may call back into it afterwards */
    void (*unload)(void);
    /* in a child forked after initialisation: forget threads that do not exist there */
    void (*forked)(void);
    /* cupool_trim() and cupool_context_release(): drop what is idle and unused */
    void (*trim)(void);
    /* cupool_stats_print_format(): this layer's part in `format`. The pool layer's opens the
     * document (the table's heading; the JSON object's "{" and first members); each layer
     * above adds its lines, or its JSON members each with a leading comma, or its Prometheus
     * families; the walk closes the JSON object. An error stops the walk; the pool layer
     * returns one only before writing anything. */
    CUresult (*report)(FILE *out, cupool_stats_format_t format);
    /* a round of the maintenance thread; true: there is more to do in a millisecond */
    bool (*maintain)(void);
};

/* Registers a layer (at most one per rank); from a constructor. */
void cupool__layer_register(const struct cupool__layer *layer);

/* The walks, in rank order. */
void cupool__layers_init(void);
void cupool__layers_close(bool all_threads);
void cupool__layers_stop(bool join);
void cupool__layers_unload(void);
void cupool__layers_forked(void);
void cupool__layers_trim(void);
CUresult cupool__layers_report(FILE *out, cupool_stats_format_t format);

/* Writers for the report hooks. s as a JSON string: quoted, with '"', '\\' and control
 * characters escaped, and every byte outside printable ASCII as \u00XX (always valid JSON,
 * whatever the bytes). One Prometheus metric without labels: its HELP and TYPE lines and its
 * sample (name and help are the caller's constants: no escaping). */
void cupool__json_string(FILE *out, const char *s);
void cupool__prom_metric(FILE *out, const char *name, const char *type, const char *help,
                         uint64_t value);
bool cupool__layers_maintain(void); /* true if any said there is more to do */

/* What the preload (the dropin layer's libcupool_preload.so) gives the driver loader; both
 * NULL outside it. own_entries: replaces, in the driver table, entries that resolved to the
 * preload's own exports (base/driver.c). driver_hint: the driver file the program itself
 * opened, or NULL. Set from the preload's constructor. */
struct cupool__driver_hooks {
    void (*own_entries)(void *driver_handle);
    const char *(*driver_hint)(void);
};
extern struct cupool__driver_hooks cupool__driver_hooks;

#endif

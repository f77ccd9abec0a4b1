/* SPDX-License-Identifier: MIT */
/* CUPOOL_* environment variables: one table of names, types, ranges, defaults and meanings
 * (docs/environment.md lists the same), a strict parser, and the parsed configuration. */
#ifndef CUPOOL_CONFIG_H
#define CUPOOL_CONFIG_H
#include "base/internal.h"
#include <limits.h>

#define CUPOOL_PATH_MAX 4096

enum cupool__stats_mode {
    CUPOOL_STATS_OFF = 0,
    CUPOOL_STATS_STDERR = 1,
    CUPOOL_STATS_FILE = 2,
    CUPOOL_STATS_STDOUT = 3
};

struct cupool__config {
    uint32_t magazine_size;   /* handles per magazine (count) */
    uint32_t stream_idle_max; /* idle streams per class kept in the depot (count) */
    uint32_t event_idle_max;  /* idle events per class kept in the depot (count) */
    uint32_t stream_prewarm;  /* streams created when a class is first used (count) */
    uint32_t event_prewarm;   /* events created when a class is first used (count) */
    uint32_t decay_ms;        /* idle handles unused this long are destroyed (ms; 0: never) */
    uint32_t headroom_percent; /* idle handles kept beyond a class's recent peak demand and
                                  replenished ahead of it (percent of the demand's swing) */
    bool background;          /* a maintenance thread does the pools' driver work */
    bool disable;             /* pass-through: acquire creates, release destroys */
    bool destroy_on_exit;     /* destroy idle handles at exit, before the driver's teardown */
    bool graph_disable;       /* pipelines launch node by node, never as graphs */
    bool graph_gate;          /* no instantiation while a cupool graph launch is in the driver */
    bool graph_upload;        /* a new exec is uploaded on its launch stream as it is instantiated */
    uint64_t graph_cache_bytes;   /* graph cache bound (bytes, estimated) */
    uint32_t graph_cache_entries; /* graph cache bound (entries) */
    uint32_t graph_execs_max;     /* execs per cached signature (count) */
    int stats_mode;           /* enum cupool__stats_mode: where the statistics go at exit */
    int stats_format;         /* cupool_stats_format_t: in which format */
    int log_level;            /* enum cupool__log_level */
    char stats_path[CUPOOL_PATH_MAX];
    char driver_path[CUPOOL_PATH_MAX];
};

/* The configuration in force; filled once by cupool__config_load() during initialisation. */
extern struct cupool__config cupool__cfg;

/* Called once per problem found, with one line (no trailing newline). */
typedef void (*cupool__config_report_fn)(const char *line, void *arg);

/*
 * Parses the CUPOOL_* entries of `envp` (a NULL-terminated "NAME=value" list, as environ)
 * into *cfg, which is first set to the defaults. Every bad value, unknown CUPOOL_* name and
 * ignored path variable produces one report line and leaves the default in place.
 * `secure` (a setuid/setgid process) makes path-valued variables be ignored.
 * Returns the number of problems reported. Pure: touches nothing but *cfg; thread-safe.
 */
int cupool__config_parse(struct cupool__config *cfg, char *const *envp, bool secure,
                         cupool__config_report_fn report, void *arg);

/* Reads the process environment into cupool__cfg and logs problems at warning level. */
void cupool__config_load(void);

/* Nearest known variable name to `name` by edit distance (for "did you mean"). */
const char *cupool__config_nearest(const char *name);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * CUPOOL_* environment variables. One table drives parsing, defaults and the "did you mean"
 * suggestions; docs/environment.md documents the same table. Bad input never stops the
 * library: each problem becomes one line naming the variable, the value, what is accepted
 * and the default used instead (jemalloc's habit for its options).
 */
#include "base/internal.h"
#include "base/config.h"
#include "base/error.h"

#include <ctype.h>
#include <stdarg.h>
#include <unistd.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef HAVE_GETAUXVAL
#include <sys/auxv.h>
#endif

extern char **environ;

struct cupool__config cupool__cfg;

enum var_type { VAR_UINT, VAR_U64, VAR_BYTES, VAR_BOOL, VAR_LOG, VAR_STATS, VAR_PATH };

struct var {
    const char *name;
    enum var_type type;
    size_t offset; /* into struct cupool__config */
    unsigned long min, max, def;
    const char *def_text; /* default of a string-valued variable */
};

#define OFF(field) offsetof(struct cupool__config, field)
static const struct var vars[] = {
    {"CUPOOL_MAGAZINE_SIZE", VAR_UINT, OFF(magazine_size), 1, 1024, 16, NULL},
    {"CUPOOL_STREAM_IDLE_MAX", VAR_UINT, OFF(stream_idle_max), 0, 1000000, 4096, NULL},
    {"CUPOOL_EVENT_IDLE_MAX", VAR_UINT, OFF(event_idle_max), 0, 1000000, 16384, NULL},
    {"CUPOOL_DECAY_MS", VAR_UINT, OFF(decay_ms), 0, 3600000, 10000, NULL},
    {"CUPOOL_HEADROOM_PERCENT", VAR_UINT, OFF(headroom_percent), 0, 100, 100, NULL},
    {"CUPOOL_BACKGROUND", VAR_BOOL, OFF(background), 0, 1, 1, NULL},
    {"CUPOOL_STREAM_PREWARM", VAR_UINT, OFF(stream_prewarm), 0, 4096, 0, NULL},
    {"CUPOOL_EVENT_PREWARM", VAR_UINT, OFF(event_prewarm), 0, 65536, 0, NULL},
    {"CUPOOL_DISABLE", VAR_BOOL, OFF(disable), 0, 1, 0, NULL},
    {"CUPOOL_GRAPH_CACHE_BYTES", VAR_BYTES, OFF(graph_cache_bytes), 0, 1UL << 48, 256UL << 20, NULL},
    {"CUPOOL_GRAPH_CACHE_ENTRIES", VAR_UINT, OFF(graph_cache_entries), 0, 1000000, 1024, NULL},
    {"CUPOOL_GRAPH_EXECS_MAX", VAR_UINT, OFF(graph_execs_max), 1, 64, 16, NULL},
    {"CUPOOL_GRAPH_DISABLE", VAR_BOOL, OFF(graph_disable), 0, 1, 0, NULL},
    {"CUPOOL_GRAPH_GATE", VAR_BOOL, OFF(graph_gate), 0, 1, 1, NULL},
    {"CUPOOL_GRAPH_UPLOAD", VAR_BOOL, OFF(graph_upload), 0, 1, 1, NULL},
    {"CUPOOL_DESTROY_ON_EXIT", VAR_BOOL, OFF(destroy_on_exit), 0, 1, 0, NULL},
    {"CUPOOL_STATS", VAR_STATS, OFF(stats_mode), 0, 0, CUPOOL_STATS_OFF, "0"},
    {"CUPOOL_DRIVER_PATH", VAR_PATH, OFF(driver_path), 0, 0, 0, "libcuda.so.1"},
    {"CUPOOL_LOG", VAR_LOG, OFF(log_level), 0, 0, CUPOOL_LOG_WARN, "warn"},
};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

static const char *const log_names[] = {"none", "error", "warn", "info", "debug"};

/* Copies `value` into `out` for quoting in a message: printable ASCII kept, the rest as \xNN,
 * at most ~64 characters (a fuzzer's megabyte of junk gives one short line). */
static void quote_value(char *out, size_t outlen, const char *value)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)value; *p && o + 8 < outlen; p++) {
        if (o >= 64) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (isprint(*p) && *p != '"' && *p != '\\')
            out[o++] = (char)*p;
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", *p);
    }
    out[o] = '\0';
}

static void report_line(cupool__config_report_fn report, void *arg, const char *fmt, ...)
    CUPOOL_PRINTF(3, 4);
static void report_line(cupool__config_report_fn report, void *arg, const char *fmt, ...)
{
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (report)
        report(line, arg);
}

/* Strict unsigned decimal: digits only, no sign, no spaces, no trailing junk, no overflow. */
static bool parse_uint(const char *s, unsigned long *out)
{
    if (!*s)
        return false;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    errno = 0;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* A byte count: strict unsigned decimal, optionally followed by one unit letter, K, M, G or T
 * (either case; powers of 1024), itself optionally followed by "B" or "iB": "512M", "1G",
 * "64KiB". No sign, space or fraction; false on overflow. */
static bool parse_bytes(const char *s, unsigned long *out)
{
    size_t digits = strspn(s, "0123456789");
    if (digits == 0 || digits > 20)
        return false;
    const char *unit = s + digits;
    unsigned shift = 0;
    if (*unit) {
        const char *p = strchr("KMGT", toupper((unsigned char)*unit));
        if (!p || !*p)
            return false;
        shift = 10u * (unsigned)(p - "KMGT" + 1);
        const char *rest = unit + 1;
        if (*rest && strcasecmp(rest, "B") != 0 && strcasecmp(rest, "iB") != 0)
            return false;
    }
    char num[24];
    memcpy(num, s, digits);
    num[digits] = '\0';
    unsigned long v;
    if (!parse_uint(num, &v) || (shift && v > (ULONG_MAX >> shift)))
        return false;
    *out = v << shift;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return true;
        }
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return true;
        }
    }
    return false;
}

static void set_defaults(struct cupool__config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NVARS; i++) {
        const struct var *v = &vars[i];
        char *field = (char *)cfg + v->offset;
        switch (v->type) {
        case VAR_UINT: *(uint32_t *)field = (uint32_t)v->def; break;
        case VAR_U64:
        case VAR_BYTES: *(uint64_t *)field = (uint64_t)v->def; break;
        case VAR_BOOL: *(bool *)field = v->def != 0; break;
        case VAR_LOG:
        case VAR_STATS: *(int *)field = (int)v->def; break;
        case VAR_PATH: snprintf(field, CUPOOL_PATH_MAX, "%s", v->def_text); break;
        }
    }
}

static void parse_one(struct cupool__config *cfg, const struct var *v, const char *value,
                      bool secure, int *problems, cupool__config_report_fn report, void *arg)
{
    char q[96];
    quote_value(q, sizeof(q), value);
    char *field = (char *)cfg + v->offset;
    switch (v->type) {
    case VAR_UINT:
    case VAR_U64: {
        unsigned long n;
        if (parse_uint(value, &n) && n >= v->min && n <= v->max) {
            if (v->type == VAR_U64)
                *(uint64_t *)field = (uint64_t)n;
            else
                *(uint32_t *)field = (uint32_t)n;
            return;
        }
        report_line(report, arg,
                    "%s=\"%s\" is not valid: expected an integer from %lu to %lu; using the "
                    "default %lu",
                    v->name, q, v->min, v->max, v->def);
        break;
    }
    case VAR_BYTES: {
        unsigned long n;
        if (parse_bytes(value, &n) && n >= v->min && n <= v->max) {
            *(uint64_t *)field = (uint64_t)n;
            return;
        }
        report_line(report, arg,
                    "%s=\"%s\" is not valid: expected a byte count from %lu to %lu, digits with "
                    "an optional K, M, G or T (powers of 1024: 512M, 1G); using the default %lu",
                    v->name, q, v->min, v->max, v->def);
        break;
    }
    case VAR_BOOL: {
        bool b;
        if (parse_bool(value, &b)) {
            *(bool *)field = b;
            return;
        }
        report_line(report, arg,
                    "%s=\"%s\" is not valid: expected 1, 0, true, false, yes, no, on or off; "
                    "using the default %s",
                    v->name, q, v->def ? "1" : "0");
        break;
    }
    case VAR_LOG: {
        for (int i = 0; i < 5; i++) {
            char digit[2] = {(char)('0' + i), 0};
            if (!strcasecmp(value, log_names[i]) || !strcmp(value, digit)) {
                *(int *)field = i;
                return;
            }
        }
        report_line(report, arg,
                    "%s=\"%s\" is not valid: expected none, error, warn, info or debug (or 0 to "
                    "4); using the default %s",
                    v->name, q, v->def_text);
        break;
    }
    case VAR_STATS: {
        /* [FORMAT:]DESTINATION or FORMAT alone (to standard error); DESTINATION: a boolean
         * word, stderr, stdout, or a file path. A first component of letters only before a
         * colon is a format's name; any other colon belongs to a path ("./a:b"). */
        static const char *const formats[] = {"table", "json", "prometheus"};
        int format = CUPOOL_STATS_FORMAT_TABLE;
        const char *dest = value;
        const char *colon = strchr(value, ':');
        size_t wlen = colon ? (size_t)(colon - value) : strlen(value);
        bool word = wlen > 0;
        for (size_t k = 0; k < wlen; k++)
            word = word && isalpha((unsigned char)value[k]);
        bool prefixed = false;
        if (word) {
            int f = -1;
            for (int k = 0; k < 3; k++)
                if (strlen(formats[k]) == wlen && !strncasecmp(value, formats[k], wlen))
                    f = k;
            if (f >= 0 && !colon) { /* a format alone: to standard error */
                cfg->stats_mode = CUPOOL_STATS_STDERR;
                cfg->stats_format = f;
                return;
            }
            if (colon && f < 0) {
                report_line(report, arg,
                            "%s=\"%s\" is not valid: \"%.*s\" is not a format (expected table, "
                            "json or prometheus before the colon; write a path whose first "
                            "component has a colon as ./%s); statistics are not printed",
                            v->name, q, (int)(wlen < 32 ? wlen : 32), q, q);
                break;
            }
            if (colon) {
                format = f;
                dest = colon + 1;
                prefixed = true;
                if (!*dest) {
                    report_line(report, arg,
                                "%s=\"%s\" is not valid: nothing after the colon (expected "
                                "%s:stderr, %s:stdout or %s:PATH); statistics are not printed",
                                v->name, q, formats[f], formats[f], formats[f]);
                    break;
                }
            }
        }
        bool b;
        if (!prefixed && (!*dest || (parse_bool(dest, &b) && !b))) {
            cfg->stats_mode = CUPOOL_STATS_OFF;
            return;
        }
        cfg->stats_format = format;
        /* any boolean word: off as above, on means standard error (never a file named "yes") */
        if ((!prefixed && parse_bool(dest, &b)) || !strcasecmp(dest, "stderr")) {
            cfg->stats_mode = CUPOOL_STATS_STDERR;
            return;
        }
        if (!strcasecmp(dest, "stdout")) {
            cfg->stats_mode = CUPOOL_STATS_STDOUT;
            return;
        }
        if (secure) {
            report_line(report, arg,
                        "%s=\"%s\" ignored: a file path is not taken from the environment of a "
                        "setuid or setgid process; statistics are not printed",
                        v->name, q);
            break;
        }
        if (strlen(dest) >= CUPOOL_PATH_MAX) {
            report_line(report, arg,
                        "%s=\"%s\" is not valid: the path is longer than %d bytes; statistics "
                        "are not printed",
                        v->name, q, CUPOOL_PATH_MAX - 1);
            break;
        }
        cfg->stats_mode = CUPOOL_STATS_FILE;
        snprintf(cfg->stats_path, sizeof(cfg->stats_path), "%s", dest);
        return;
    }
    case VAR_PATH:
        if (secure) {
            report_line(report, arg,
                        "%s=\"%s\" ignored: a path is not taken from the environment of a setuid "
                        "or setgid process; using the default %s",
                        v->name, q, v->def_text);
            break;
        }
        if (!*value || strlen(value) >= CUPOOL_PATH_MAX) {
            report_line(report, arg,
                        "%s=\"%s\" is not valid: expected a file name or path of 1 to %d bytes; "
                        "using the default %s",
                        v->name, q, CUPOOL_PATH_MAX - 1, v->def_text);
            break;
        }
        snprintf(field, CUPOOL_PATH_MAX, "%s", value);
        return;
    }
    (*problems)++;
    /* the message says the default is used: make it so, even if an earlier entry of the same
     * name had set a value */
    struct cupool__config defaults;
    set_defaults(&defaults);
    if (v->type == VAR_STATS) {
        cfg->stats_mode = defaults.stats_mode;
        cfg->stats_format = defaults.stats_format;
        cfg->stats_path[0] = '\0';
    } else {
        size_t size = v->type == VAR_UINT ? sizeof(uint32_t)
                    : v->type == VAR_U64 || v->type == VAR_BYTES ? sizeof(uint64_t)
                    : v->type == VAR_BOOL ? sizeof(bool)
                    : v->type == VAR_PATH ? (size_t)CUPOOL_PATH_MAX
                                          : sizeof(int);
        memcpy(field, (char *)&defaults + v->offset, size);
    }
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return (size_t)-1 / 2;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diag + cost;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (up + 1 < best)
                best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *cupool__config_nearest(const char *name)
{
    const char *best = vars[0].name;
    size_t best_d = (size_t)-1;
    /* a known name the unknown one begins (CUPOOL_HEADROOM for CUPOOL_HEADROOM_PERCENT): the
     * edit distance of a dropped suffix can exceed that of an unrelated name */
    size_t len = strlen(name);
    for (size_t i = 0; i < NVARS; i++)
        if (len > 7 && strncmp(vars[i].name, name, len) == 0 && vars[i].name[len] == '_')
            return vars[i].name;
    for (size_t i = 0; i < NVARS; i++) {
        size_t d = edit_distance(name, vars[i].name);
        if (d < best_d) {
            best_d = d;
            best = vars[i].name;
        }
    }
    return best;
}

int cupool__config_parse(struct cupool__config *cfg, char *const *envp, bool secure,
                         cupool__config_report_fn report, void *arg)
{
    int problems = 0;
    set_defaults(cfg);
    if (!envp)
        return 0;
    for (char *const *e = envp; *e; e++) {
        const char *entry = *e;
        if (strncmp(entry, "CUPOOL_", 7) != 0)
            continue;
        if (strncmp(entry, "CUPOOL_PY_", 10) == 0)
            continue; /* the Python package's own (python/cupool), not the library's */
        const char *eq = strchr(entry, '=');
        size_t namelen = eq ? (size_t)(eq - entry) : strlen(entry);
        const char *value = eq ? eq + 1 : "";
        const struct var *v = NULL;
        for (size_t i = 0; i < NVARS; i++) {
            if (strlen(vars[i].name) == namelen && !strncmp(vars[i].name, entry, namelen)) {
                v = &vars[i];
                break;
            }
        }
        if (v) {
            parse_one(cfg, v, value, secure, &problems, report, arg);
            continue;
        }
        char name[80], q[96];
        snprintf(name, sizeof(name), "%.*s", (int)(namelen < 70 ? namelen : 70), entry);
        quote_value(q, sizeof(q), name);
        report_line(report, arg, "unknown variable %s ignored (did you mean %s?)", q,
                    cupool__config_nearest(name));
        problems++;
    }
    /* Prewarming more than the depot may keep idle would destroy the surplus at once. */
    if (cfg->stream_prewarm > cfg->stream_idle_max) {
        report_line(report, arg,
                    "CUPOOL_STREAM_PREWARM=%u is above CUPOOL_STREAM_IDLE_MAX=%u; prewarming %u",
                    cfg->stream_prewarm, cfg->stream_idle_max, cfg->stream_idle_max);
        cfg->stream_prewarm = cfg->stream_idle_max;
        problems++;
    }
    if (cfg->event_prewarm > cfg->event_idle_max) {
        report_line(report, arg,
                    "CUPOOL_EVENT_PREWARM=%u is above CUPOOL_EVENT_IDLE_MAX=%u; prewarming %u",
                    cfg->event_prewarm, cfg->event_idle_max, cfg->event_idle_max);
        cfg->event_prewarm = cfg->event_idle_max;
        problems++;
    }
    return problems;
}

static bool process_is_secure(void)
{
#ifdef HAVE_GETAUXVAL
    return getauxval(AT_SECURE) != 0;
#else
    return getuid() != geteuid() || getgid() != getegid();
#endif
}

/* Problems are held until CUPOOL_LOG itself is known, so it governs their printing. */
struct pending {
    char lines[16][400];
    int n;
    int dropped;
};

static void collect(const char *line, void *arg)
{
    struct pending *p = arg;
    if (p->n < 16)
        snprintf(p->lines[p->n++], sizeof(p->lines[0]), "%s", line);
    else
        p->dropped++;
}

void cupool__config_load(void)
{
    static struct pending pending; /* static: 6 KB is too much for a caller's stack */
    pending.n = pending.dropped = 0;
    cupool__config_parse(&cupool__cfg, environ, process_is_secure(), collect, &pending);
    cupool__log_level = cupool__cfg.log_level;
    for (int i = 0; i < pending.n; i++)
        cupool__log(CUPOOL_LOG_WARN, "%s", pending.lines[i]);
    if (pending.dropped)
        cupool__log(CUPOOL_LOG_WARN, "%d more problems with CUPOOL_* variables not shown",
                    pending.dropped);
}

/* SPDX-License-Identifier: MIT */
/*
 * Machine-readable statistics: cupool_stats_print_format()'s JSON and Prometheus output read
 * back with strict parsers of their grammars (not grepped) and checked against the _get
 * functions; CUPOOL_STATS=json:PATH and prometheus:PATH at exit; the growable structs' size
 * protocol, with guard bytes around what cupool may write; the class's device.
 */
#define _GNU_SOURCE
#include "common/testutil.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a strict JSON parser (RFC 8259): recursive descent into a tree ---- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
    enum jtype type;
    bool b;
    bool integer;       /* J_NUM: no fraction, no exponent */
    bool negative;      /* J_NUM */
    uint64_t u;         /* J_NUM: magnitude of an integer */
    char *s;            /* J_STR: decoded (UTF-8), NUL-terminated */
    size_t n;           /* J_ARR, J_OBJ: members */
    char **keys;        /* J_OBJ */
    struct jv **items;  /* J_ARR, J_OBJ */
};

struct jparser {
    const char *p;
    const char *err;
    int depth;
};

static struct jv *jnew(enum jtype t)
{
    struct jv *v = calloc(1, sizeof(*v));
    ck_assert_ptr_nonnull(v);
    v->type = t;
    return v;
}

static void jfree(struct jv *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        if (v->keys)
            free(v->keys[i]);
        jfree(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->s);
    free(v);
}

static void jws(struct jparser *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
        j->p++;
}

static struct jv *jfail(struct jparser *j, const char *why)
{
    if (!j->err)
        j->err = why;
    return NULL;
}

static void put_utf8(char **out, size_t *len, size_t *cap, uint32_t cp)
{
    char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | cp >> 6);
        b[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | cp >> 12);
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        b[0] = (char)(0xf0 | cp >> 18);
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    if (*len + k + 1 > *cap) {
        *cap = (*cap + k + 1) * 2;
        *out = realloc(*out, *cap);
        ck_assert_ptr_nonnull(*out);
    }
    memcpy(*out + *len, b, k);
    *len += k;
    (*out)[*len] = '\0';
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}

/* A string at j->p (the opening quote); the decoded text, or NULL. */
static char *jstring(struct jparser *j)
{
    if (*j->p != '"')
        return jfail(j, "expected a string"), NULL;
    j->p++;
    size_t len = 0, cap = 16;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    out[0] = '\0';
    for (;;) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return out;
        }
        if (c == '\0' || c < 0x20) {
            free(out);
            return jfail(j, c ? "control character in a string" : "unterminated string"), NULL;
        }
        if (c != '\\') {
            /* raw bytes are taken as they are; the producer under test emits ASCII only */
            if (c >= 0x80) {
                free(out);
                return jfail(j, "a byte outside ASCII in cupool's output"), NULL;
            }
            put_utf8(&out, &len, &cap, c);
            j->p++;
            continue;
        }
        j->p++;
        uint32_t cp;
        switch (*j->p) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (!hex4(j->p + 1, &cp)) {
                free(out);
                return jfail(j, "bad \\u escape"), NULL;
            }
            j->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
                uint32_t lo;
                if (j->p[1] != '\\' || j->p[2] != 'u' || !hex4(j->p + 3, &lo) || lo < 0xdc00 ||
                    lo > 0xdfff) {
                    free(out);
                    return jfail(j, "lone high surrogate"), NULL;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                j->p += 6;
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                free(out);
                return jfail(j, "lone low surrogate"), NULL;
            }
            break;
        default:
            free(out);
            return jfail(j, "bad escape"), NULL;
        }
        j->p++;
        put_utf8(&out, &len, &cap, cp);
    }
}

static struct jv *jvalue(struct jparser *j);

static struct jv *jnumber(struct jparser *j)
{
    struct jv *v = jnew(J_NUM);
    v->integer = true;
    if (*j->p == '-') {
        v->negative = true;
        j->p++;
    }
    if (*j->p == '0') {
        j->p++;
        if (isdigit((unsigned char)*j->p)) {
            jfree(v);
            return jfail(j, "leading zero");
        }
    } else if (*j->p >= '1' && *j->p <= '9') {
        while (isdigit((unsigned char)*j->p)) {
            uint64_t d = (uint64_t)(*j->p - '0');
            if (v->u > (UINT64_MAX - d) / 10) {
                jfree(v);
                return jfail(j, "integer beyond 64 bits");
            }
            v->u = v->u * 10 + d;
            j->p++;
        }
    } else {
        jfree(v);
        return jfail(j, "bad number");
    }
    if (*j->p == '.') {
        v->integer = false;
        j->p++;
        if (!isdigit((unsigned char)*j->p)) {
            jfree(v);
            return jfail(j, "no digit after the decimal point");
        }
        while (isdigit((unsigned char)*j->p))
            j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        v->integer = false;
        j->p++;
        if (*j->p == '+' || *j->p == '-')
            j->p++;
        if (!isdigit((unsigned char)*j->p)) {
            jfree(v);
            return jfail(j, "no digit in the exponent");
        }
        while (isdigit((unsigned char)*j->p))
            j->p++;
    }
    return v;
}

static void jpush(struct jv *v, char *key, struct jv *item)
{
    v->items = realloc(v->items, (v->n + 1) * sizeof(*v->items));
    ck_assert_ptr_nonnull(v->items);
    if (v->type == J_OBJ) {
        v->keys = realloc(v->keys, (v->n + 1) * sizeof(*v->keys));
        ck_assert_ptr_nonnull(v->keys);
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
}

static struct jv *jcontainer(struct jparser *j, bool object)
{
    char close = object ? '}' : ']';
    struct jv *v = jnew(object ? J_OBJ : J_ARR);
    j->p++;
    jws(j);
    if (*j->p == close) {
        j->p++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            jws(j);
            if (!(key = jstring(j))) {
                jfree(v);
                return NULL;
            }
            for (size_t i = 0; i < v->n; i++)
                if (!strcmp(v->keys[i], key)) {
                    free(key);
                    jfree(v);
                    return jfail(j, "duplicate key");
                }
            jws(j);
            if (*j->p != ':') {
                free(key);
                jfree(v);
                return jfail(j, "expected ':'");
            }
            j->p++;
        }
        struct jv *item = jvalue(j);
        if (!item) {
            free(key);
            jfree(v);
            return NULL;
        }
        jpush(v, key, item);
        jws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == close) {
            j->p++;
            return v;
        }
        jfree(v);
        return jfail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static struct jv *jvalue(struct jparser *j)
{
    if (++j->depth > 64)
        return jfail(j, "nested too deep");
    jws(j);
    struct jv *v = NULL;
    switch (*j->p) {
    case '{': v = jcontainer(j, true); break;
    case '[': v = jcontainer(j, false); break;
    case '"': {
        char *s = jstring(j);
        if (s) {
            v = jnew(J_STR);
            v->s = s;
        }
        break;
    }
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        for (int i = 0; i < 3 && !v; i++)
            if (!strncmp(j->p, words[i], strlen(words[i]))) {
                v = jnew(i == 2 ? J_NULL : J_BOOL);
                v->b = i == 0;
                j->p += strlen(words[i]);
            }
        if (!v)
            jfail(j, "bad literal");
        break;
    }
    default: v = jnumber(j); break;
    }
    j->depth--;
    return v;
}

/* The whole text is one JSON value (whitespace around it allowed), or the test fails. */
static struct jv *json_parse(const char *text)
{
    struct jparser j = {text, NULL, 0};
    struct jv *v = jvalue(&j);
    if (v) {
        jws(&j);
        if (*j.p) {
            jfree(v);
            v = jfail(&j, "text after the value");
        }
    }
    ck_assert_msg(v, "invalid JSON (%s) at offset %td: %.60s\nin: %s", j.err, j.p - text, j.p,
                  text);
    return v;
}

static struct jv *jget(const struct jv *obj, const char *key)
{
    ck_assert_int_eq(obj->type, J_OBJ);
    for (size_t i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key))
            return obj->items[i];
    ck_abort_msg("no member \"%s\"", key);
    return NULL;
}

static uint64_t jint(const struct jv *obj, const char *key)
{
    const struct jv *v = jget(obj, key);
    ck_assert_msg(v->type == J_NUM && v->integer && !v->negative, "\"%s\" is not a count", key);
    return v->u;
}

static long long jsigned(const struct jv *obj, const char *key)
{
    const struct jv *v = jget(obj, key);
    ck_assert_msg(v->type == J_NUM && v->integer, "\"%s\" is not an integer", key);
    return v->negative ? -(long long)v->u : (long long)v->u;
}

static bool jbool(const struct jv *obj, const char *key)
{
    const struct jv *v = jget(obj, key);
    ck_assert_msg(v->type == J_BOOL, "\"%s\" is not a boolean", key);
    return v->b;
}

static const char *jstr(const struct jv *obj, const char *key)
{
    const struct jv *v = jget(obj, key);
    ck_assert_msg(v->type == J_STR, "\"%s\" is not a string", key);
    return v->s;
}

START_TEST(json_parser_is_strict)
{
    static const char *const bad[] = {
        "", "{", "{\"a\":1,}", "[1,]", "{\"a\" 1}", "01", "1.", "-", "1e", "\"\\x\"",
        "\"a\nb\"", "{\"a\":1}x", "{\"a\":1,\"a\":2}", "[\"\\ud800\"]", "tru", "{a:1}",
        "18446744073709551616",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct jparser j = {bad[i], NULL, 0};
        struct jv *v = jvalue(&j);
        if (v) {
            jws(&j);
            ck_assert_msg(*j.p, "accepted invalid JSON: %s", bad[i]);
            jfree(v);
        }
    }
    struct jv *v = json_parse(" {\"a\":[1,-2,3.5e1,true,false,null,\"\\u00e9\\n\\\"\"],\"b\":{}} ");
    const struct jv *a = jget(v, "a");
    ck_assert_uint_eq(a->n, 7);
    ck_assert(a->items[1]->negative && a->items[1]->u == 2);
    ck_assert(!a->items[2]->integer);
    ck_assert_str_eq(a->items[6]->s, "\xc3\xa9\n\"");
    jfree(v);
}
END_TEST

/* ---- a Prometheus text format 0.0.4 reader ---- */

struct psample {
    char name[128];
    char labels[512]; /* as written, between the braces */
    double value;
};

struct prom {
    struct psample *s;
    size_t n;
    char types[128][128]; /* families with a TYPE line, in order */
    char type_of[128][16];
    size_t ntypes;
};

static bool prom_name_ok(const char *p, size_t len, bool label)
{
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        bool ok = isalpha((unsigned char)c) || c == '_' || (!label && c == ':') ||
                  (i > 0 && isdigit((unsigned char)c));
        if (!ok)
            return false;
    }
    return true;
}

/* The family a sample belongs to: its name, or for a counter its name less _total. */
static const char *prom_family(const struct prom *pr, const char *name, size_t *index)
{
    for (size_t i = 0; i < pr->ntypes; i++)
        if (!strcmp(pr->types[i], name)) {
            *index = i;
            return pr->types[i];
        }
    return NULL;
}

/* Parses the exposition text line by line against the grammar: NULL, or what is wrong.
 * Checks too: one TYPE per family, before its samples; a family's samples together; every
 * sample typed; names prefixed cupool_; counters named *_total; no sample repeated. */
static char perr[512];
#define PCHECK(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            snprintf(perr, sizeof(perr), __VA_ARGS__);                                      \
            free(copy);                                                                     \
            return perr;                                                                    \
        }                                                                                   \
    } while (0)
static const char *prom_try(const char *text, struct prom *pr)
{
    memset(pr, 0, sizeof(*pr));
    char *copy = strdup(text);
    if (!copy)
        return "no memory";
    size_t len = strlen(copy);
    PCHECK(len > 0 && copy[len - 1] == '\n', "the exposition does not end with a newline");
    long current = -1; /* the family whose samples are being read */
    bool done[128] = {false};
    int lineno = 0;
    for (char *line = copy, *next; *line; line = next) {
        next = strchr(line, '\n');
        PCHECK(next, "the last line has no newline");
        *next++ = '\0';
        lineno++;
        PCHECK(*line, "line %d is empty", lineno);
        if (line[0] == '#') {
            char kw[8], name[128], rest[256] = "";
            int k = sscanf(line, "# %7s %127s %255[^\n]", kw, name, rest);
            PCHECK(k >= 2, "line %d: a comment that is neither HELP nor TYPE: %s", lineno,
                          line);
            PCHECK(!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7),
                          "line %d: %s", lineno, line);
            PCHECK(prom_name_ok(name, strlen(name), false), "line %d: bad name %s",
                          lineno, name);
            PCHECK(!strncmp(name, "cupool_", 7), "line %d: %s is not cupool_*", lineno,
                          name);
            if (!strcmp(kw, "HELP")) {
                PCHECK(k == 3, "line %d: HELP without text", lineno);
                continue;
            }
            PCHECK(!strcmp(rest, "counter") || !strcmp(rest, "gauge") ||
                              !strcmp(rest, "histogram") || !strcmp(rest, "summary") ||
                              !strcmp(rest, "untyped"),
                          "line %d: bad type %s", lineno, rest);
            size_t dummy;
            PCHECK(!prom_family(pr, name, &dummy), "line %d: second TYPE for %s", lineno,
                          name);
            PCHECK(pr->ntypes < 128, "too many families");
            if (!strcmp(rest, "counter"))
                PCHECK(strlen(name) > 6 && !strcmp(name + strlen(name) - 6, "_total"),
                              "line %d: counter %s is not named *_total", lineno, name);
            snprintf(pr->types[pr->ntypes], sizeof(pr->types[0]), "%s", name);
            snprintf(pr->type_of[pr->ntypes], sizeof(pr->type_of[0]), "%s", rest);
            pr->ntypes++;
            continue;
        }
        /* metric_name [ "{" label_name "=" `"` label_value `"` { "," ... } [ "," ] "}" ] value */
        struct psample s;
        memset(&s, 0, sizeof(s));
        const char *p = line;
        size_t nlen = strcspn(p, "{ ");
        PCHECK(nlen < sizeof(s.name) && prom_name_ok(p, nlen, false),
                      "line %d: bad metric name: %s", lineno, line);
        memcpy(s.name, p, nlen);
        p += nlen;
        if (*p == '{') {
            const char *lstart = ++p;
            while (*p != '}') {
                size_t ll = strcspn(p, "=");
                PCHECK(prom_name_ok(p, ll, true), "line %d: bad label name: %s", lineno,
                              p);
                p += ll;
                PCHECK(p[0] == '=' && p[1] == '"', "line %d: label without a value: %s",
                              lineno, line);
                p += 2;
                while (*p != '"') {
                    PCHECK(*p, "line %d: unterminated label value", lineno);
                    if (*p == '\\') {
                        PCHECK(p[1] == '\\' || p[1] == '"' || p[1] == 'n',
                                      "line %d: bad escape in a label value", lineno);
                        p++;
                    }
                    p++;
                }
                p++;
                if (*p == ',')
                    p++;
                else
                    PCHECK(*p == '}', "line %d: expected ',' or '}': %s", lineno, line);
            }
            size_t lablen = (size_t)(p - lstart);
            PCHECK(lablen < sizeof(s.labels), "labels too long");
            memcpy(s.labels, lstart, lablen);
            p++;
        }
        PCHECK(*p == ' ', "line %d: no space before the value: %s", lineno, line);
        p++;
        char *end;
        errno = 0;
        s.value = strtod(p, &end);
        PCHECK(end != p && errno == 0 && (*end == '\0' || *end == ' '),
                      "line %d: bad value: %s", lineno, line);
        if (*end == ' ') { /* an optional timestamp: an integer */
            char *tend;
            (void)strtoll(end + 1, &tend, 10);
            PCHECK(tend != end + 1 && *tend == '\0', "line %d: bad timestamp", lineno);
        }
        size_t fi;
        PCHECK(prom_family(pr, s.name, &fi), "line %d: %s has no TYPE before it", lineno,
                      s.name);
        if ((long)fi != current) {
            PCHECK(!done[fi], "line %d: the samples of %s are not together", lineno,
                          s.name);
            if (current >= 0)
                done[current] = true;
            current = (long)fi;
        }
        for (size_t i = 0; i < pr->n; i++)
            PCHECK(strcmp(pr->s[i].name, s.name) || strcmp(pr->s[i].labels, s.labels),
                          "line %d: sample repeated: %s", lineno, line);
        pr->s = realloc(pr->s, (pr->n + 1) * sizeof(*pr->s));
        PCHECK(pr->s, "no memory");
        pr->s[pr->n++] = s;
    }
    free(copy);
    return NULL;
}

/* prom_try, failing the test on an error. */
static void prom_parse(const char *text, struct prom *pr)
{
    const char *err = prom_try(text, pr);
    ck_assert_msg(!err, "invalid exposition: %s\nin:\n%s", err, text);
}

/* The value of the sample name{labels}, or fails the test. */
static double prom_value(const struct prom *pr, const char *name, const char *labels)
{
    for (size_t i = 0; i < pr->n; i++)
        if (!strcmp(pr->s[i].name, name) && !strcmp(pr->s[i].labels, labels))
            return pr->s[i].value;
    ck_abort_msg("no sample %s{%s}", name, labels);
    return 0;
}

static const char *prom_type(const struct prom *pr, const char *name)
{
    size_t i;
    ck_assert_msg(prom_family(pr, name, &i), "no family %s", name);
    return pr->type_of[i];
}

/* ---- helpers ---- */

/* cupool_stats_print_format() into a string (free it). */
static char *printed(cupool_stats_format_t format)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    TU_OK(cupool_stats_print_format(f, format));
    fclose(f);
    return buf;
}

static size_t all_stats(cupool_class_stats_t *st, size_t cap)
{
    size_t n = 0;
    st[0].size = sizeof(*st);
    TU_OK(cupool_stats_get(st, cap, &n));
    ck_assert_uint_le(n, cap);
    return n;
}

/* The labels cupool writes for a class. */
static void class_labels(const cupool_class_stats_t *s, char *out, size_t len)
{
    snprintf(out, len,
             "kind=\"%s\",context_id=\"%llu\",device=\"%d\",flags=\"0x%x\",priority=\"%d\","
             "context_alive=\"%d\"",
             s->kind == CUPOOL_KIND_STREAM ? "stream" : "event", s->context_id, s->device,
             s->flags, s->priority, s->context_alive ? 1 : 0);
}

/* Three streams acquired, one released, an event acquired and released; the maintenance
 * thread off, so nothing moves while the test compares. */
static CUstream held[3];
static void traffic(void)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
    for (int i = 0; i < 3; i++)
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_stream_release(held[2]));
    CUevent e;
    TU_OK(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING));
    TU_OK(cupool_event_release(e));
}

/* ---- JSON ---- */

/* Device d's graph statistics (cupool_graph_stats_device_get). */
static cupool_graph_stats_t device_stats(int d)
{
    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_device_get(d, &g));
    return g;
}

/* The "devices" array of the JSON "graph" object: an object per device that launched through
 * the cache, in ordinal order, each with the figures cupool_graph_stats_device_get gives. */
static void json_devices_match(const struct jv *devs)
{
    ck_assert_int_eq(devs->type, J_ARR);
    size_t i = 0;
    for (int d = 0; d < CUPOOL_STATS_DEVICES; d++) {
        cupool_graph_stats_t g = device_stats(d);
        if (!g.launches)
            continue;
        ck_assert_uint_lt(i, devs->n);
        const struct jv *o = devs->items[i++];
        ck_assert_uint_eq(o->n, 13);
        ck_assert_int_eq(jsigned(o, "device"), d);
        ck_assert_uint_eq(jint(o, "launches"), g.launches);
        ck_assert_uint_eq(jint(o, "hits"), g.hits);
        ck_assert_uint_eq(jint(o, "misses"), g.misses);
        ck_assert_uint_eq(jint(o, "instantiations"), g.instantiations);
        ck_assert_uint_eq(jint(o, "updates"), g.updates);
        ck_assert_uint_eq(jint(o, "nodes_updated"), g.nodes_updated);
        ck_assert_uint_eq(jint(o, "evictions"), g.evictions);
        ck_assert_uint_eq(jint(o, "claims_lock_free"), g.claims_lock_free);
        ck_assert_uint_eq(jint(o, "claims_locked"), g.claims_locked);
        ck_assert_uint_eq(jint(o, "entries"), g.entries);
        ck_assert_uint_eq(jint(o, "execs"), g.execs);
        ck_assert_uint_eq(jint(o, "bytes"), g.bytes);
    }
    ck_assert_uint_eq(devs->n, i);
}

static void json_matches(const struct jv *doc)
{
    ck_assert_str_eq(jstr(doc, "version"), cupool_version());
    ck_assert_int_eq(jsigned(doc, "pid"), (long long)getpid());
    ck_assert_uint_gt(jint(doc, "metadata_bytes"), 0);
    ck_assert_uint_gt(jint(doc, "magazine_size"), 0);
    (void)jbool(doc, "pooling_disabled");
    (void)jstr(doc, "allocator");

    cupool_class_stats_t st[16];
    size_t n = all_stats(st, 16);
    const struct jv *classes = jget(doc, "classes");
    ck_assert_int_eq(classes->type, J_ARR);
    ck_assert_uint_eq(classes->n, n);
    for (size_t i = 0; i < n; i++) {
        const struct jv *c = classes->items[i];
        const cupool_class_stats_t *s = &st[i];
        ck_assert_uint_eq(c->n, 15); /* every field but size */
        ck_assert_str_eq(jstr(c, "kind"), s->kind == CUPOOL_KIND_STREAM ? "stream" : "event");
        ck_assert_uint_eq(jint(c, "context_id"), s->context_id);
        ck_assert_int_eq(jsigned(c, "device"), s->device);
        ck_assert_uint_eq(jint(c, "flags"), s->flags);
        ck_assert_int_eq(jsigned(c, "priority"), s->priority);
        ck_assert_int_eq(jbool(c, "context_alive"), s->context_alive != 0);
        ck_assert_uint_eq(jint(c, "acquires"), s->acquires);
        ck_assert_uint_eq(jint(c, "hits"), s->hits);
        ck_assert_uint_eq(jint(c, "releases"), s->releases);
        ck_assert_uint_eq(jint(c, "creates"), s->creates);
        ck_assert_uint_eq(jint(c, "destroys"), s->destroys);
        ck_assert_uint_eq(jint(c, "dropped"), s->dropped);
        ck_assert_uint_eq(jint(c, "idle"), s->idle);
        ck_assert_uint_eq(jint(c, "in_use"), s->in_use);
        ck_assert_uint_eq(jint(c, "high_water"), s->high_water);
    }

    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    TU_OK(cupool_maintenance_stats_get(&m));
    const struct jv *jm = jget(doc, "maintenance");
    ck_assert_uint_eq(jm->n, 7);
    ck_assert_int_eq(jbool(jm, "running"), m.running != 0);
    ck_assert_uint_eq(jint(jm, "wakeups"), m.wakeups);
    ck_assert_uint_eq(jint(jm, "background_creates"), m.background_creates);
    ck_assert_uint_eq(jint(jm, "background_destroys"), m.background_destroys);
    ck_assert_uint_eq(jint(jm, "request_creates"), m.request_creates);
    ck_assert_uint_eq(jint(jm, "request_destroys"), m.request_destroys);
    ck_assert_uint_eq(jint(jm, "graph_reaps"), m.graph_reaps);

    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&g));
    const struct jv *jg = jget(doc, "graph");
    ck_assert_uint_eq(jg->n, 27);
    ck_assert_uint_eq(jint(jg, "launches"), g.launches);
    ck_assert_uint_eq(jint(jg, "hits"), g.hits);
    ck_assert_uint_eq(jint(jg, "misses"), g.misses);
    ck_assert_uint_eq(jint(jg, "instantiations"), g.instantiations);
    ck_assert_uint_eq(jint(jg, "updates"), g.updates);
    ck_assert_uint_eq(jint(jg, "nodes_updated"), g.nodes_updated);
    ck_assert_uint_eq(jint(jg, "update_failures"), g.update_failures);
    ck_assert_uint_eq(jint(jg, "evictions"), g.evictions);
    ck_assert_uint_eq(jint(jg, "eager_launches"), g.eager_launches);
    ck_assert_uint_eq(jint(jg, "entries"), g.entries);
    ck_assert_uint_eq(jint(jg, "execs"), g.execs);
    ck_assert_uint_eq(jint(jg, "bytes"), g.bytes);
    ck_assert_uint_eq(jint(jg, "claims_lock_free"), g.claims_lock_free);
    ck_assert_uint_eq(jint(jg, "claims_locked"), g.claims_locked);
    ck_assert_uint_eq(jint(jg, "nodes_compared"), g.nodes_compared);
    ck_assert_uint_eq(jint(jg, "uploads"), g.uploads);
    ck_assert_uint_eq(jint(jg, "update_topology_changed"), g.update_topology_changed);
    ck_assert_uint_eq(jint(jg, "update_node_type_changed"), g.update_node_type_changed);
    ck_assert_uint_eq(jint(jg, "update_function_changed"), g.update_function_changed);
    ck_assert_uint_eq(jint(jg, "update_parameters_changed"), g.update_parameters_changed);
    ck_assert_uint_eq(jint(jg, "update_not_supported"), g.update_not_supported);
    ck_assert_uint_eq(jint(jg, "update_unsupported_function_change"),
                      g.update_unsupported_function_change);
    ck_assert_uint_eq(jint(jg, "update_attributes_changed"), g.update_attributes_changed);
    ck_assert_uint_eq(jint(jg, "update_other"), g.update_other);
    ck_assert_uint_eq(jint(jg, "node_update_refusals"), g.node_update_refusals);
    ck_assert_uint_eq(jint(jg, "update_errors"), g.update_errors);
    json_devices_match(jget(jg, "devices"));
}

START_TEST(json_matches_the_get_functions)
{
    traffic();
    char *text = printed(CUPOOL_STATS_FORMAT_JSON);
    ck_assert_msg(strchr(text, '\n') == text + strlen(text) - 1, "not one line: %s", text);
    struct jv *doc = json_parse(text);
    ck_assert_uint_eq(doc->n, 10);
    json_matches(doc);
    /* the traffic itself: 3 streams acquired, 1 released */
    const struct jv *classes = jget(doc, "classes");
    ck_assert_uint_eq(classes->n, 2);
    const struct jv *c = classes->items[0];
    ck_assert_str_eq(jstr(c, "kind"), "stream");
    ck_assert_uint_eq(jint(c, "acquires"), 3);
    ck_assert_uint_eq(jint(c, "releases"), 1);
    ck_assert_uint_eq(jint(c, "in_use"), 2);
    ck_assert_uint_eq(jint(c, "flags"), CU_STREAM_NON_BLOCKING);
    ck_assert_int_eq(jsigned(c, "device"), tu_dev);
    unsigned long long id;
    TU_OK(tu.cuCtxGetId(tu_ctx, &id));
    ck_assert_uint_eq(jint(c, "context_id"), id);
    ck_assert(jbool(c, "context_alive"));
    const struct jv *e = classes->items[1];
    ck_assert_str_eq(jstr(e, "kind"), "event");
    ck_assert_uint_eq(jint(e, "in_use"), 0);
    ck_assert_uint_eq(jint(e, "idle"), 1);
    jfree(doc);
    free(text);
    for (int i = 0; i < 2; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

START_TEST(json_of_graph_launches)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    CUdeviceptr mem;
    TU_OK(tu.cuMemAlloc(&mem, 256));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int i = 0; i < 3; i++) {
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_memset(p, mem, (unsigned)i, 4, 16, NULL));
        TU_OK(cupool_pipeline_launch(p, s));
    }
    TU_OK(tu.cuStreamSynchronize(s));
    char *text = printed(CUPOOL_STATS_FORMAT_JSON);
    struct jv *doc = json_parse(text);
    json_matches(doc);
    ck_assert_uint_eq(jint(jget(doc, "graph"), "launches"), 3);
    /* the launches' device, and only it */
    const struct jv *devs = jget(jget(doc, "graph"), "devices");
    ck_assert_uint_eq(devs->n, 1);
    ck_assert_int_eq(jsigned(devs->items[0], "device"), tu_dev);
    ck_assert_uint_eq(jint(devs->items[0], "launches"), 3);
    ck_assert_uint_eq(jint(devs->items[0], "misses"), 1);
    jfree(doc);
    free(text);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_stream_release(s));
    TU_OK(tu.cuMemFree(mem));
}
END_TEST

/* Simulated driver: every graph counter nonzero (an upload at each instantiation, capture
 * updates refused for each reason, a node update refused, an update whose error no
 * instantiation cures), and the three formats say what cupool_graph_stats_get says. */
static CUdeviceptr refused_mem;
static CUfunction refused_set;
static void prom_graph_matches(const struct prom *pr, const cupool_graph_stats_t *g);

static CUresult refused_capture(CUstream s, void *user)
{
    void *args[] = {&refused_mem, user};
    return tu.cuLaunchKernel(refused_set, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

START_TEST(graph_refusals_in_every_format)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
    struct tu_kernels k;
    tu_load_kernels(&k);
    refused_set = k.set_u32;
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(tu.cuMemAlloc(&refused_mem, 64));
    unsigned v = 1;
    TU_OK(cupool_capture_launch(3, s, refused_capture, &v, CUPOOL_CAPTURE_UPDATE));
    static const CUgraphExecUpdateResult reasons[] = {
        CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED,
        CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE,
        CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR,
    };
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        tu_fake.exec_update_refuse(reasons[i], 1);
        v++;
        TU_OK(cupool_capture_launch(3, s, refused_capture, &v, CUPOOL_CAPTURE_UPDATE));
    }
    tu_fake.fault("cuGraphExecUpdate", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
    TU_EQ(cupool_capture_launch(3, s, refused_capture, &v, CUPOOL_CAPTURE_UPDATE),
          CUDA_ERROR_OUT_OF_MEMORY);
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (unsigned i = 0; i < 2; i++) {
        void *args[] = {&refused_mem, &i};
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_kernel(p, k.set_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
        if (i)
            tu_fake.fault("cuGraphExecKernelNodeSetParams", 0, 1, CUDA_ERROR_INVALID_VALUE);
        TU_OK(cupool_pipeline_launch(p, s));
    }
    TU_OK(tu.cuStreamSynchronize(s));
    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&g));
    ck_assert_uint_eq(g.update_topology_changed, 1);
    ck_assert_uint_eq(g.update_node_type_changed, 1);
    ck_assert_uint_eq(g.update_function_changed, 1);
    ck_assert_uint_eq(g.update_parameters_changed, 1);
    ck_assert_uint_eq(g.update_not_supported, 1);
    ck_assert_uint_eq(g.update_unsupported_function_change, 1);
    ck_assert_uint_eq(g.update_attributes_changed, 1);
    ck_assert_uint_eq(g.update_other, 2); /* CU_GRAPH_EXEC_UPDATE_ERROR, the failed call */
    ck_assert_uint_eq(g.node_update_refusals, 1);
    ck_assert_uint_eq(g.update_errors, 1);
    ck_assert_uint_eq(g.update_failures, 9); /* 8 reasons and the node, each instantiated */
    ck_assert_uint_eq(g.uploads, g.instantiations);
    char *text = printed(CUPOOL_STATS_FORMAT_JSON);
    struct jv *doc = json_parse(text);
    json_matches(doc);
    jfree(doc);
    free(text);
    text = printed(CUPOOL_STATS_FORMAT_PROMETHEUS);
    struct prom pr;
    prom_parse(text, &pr);
    prom_graph_matches(&pr, &g);
    free(pr.s);
    free(text);
    text = printed(CUPOOL_STATS_FORMAT_TABLE);
    char line[512];
    snprintf(line, sizeof(line),
             "graph cache: %llu execs uploaded as instantiated; refused updates: 1 topology "
             "changed, 1 node type changed, 1 function changed, 1 parameters changed, 1 not "
             "supported, 1 unsupported function change, 1 attributes changed, 2 other, 1 node "
             "updates; 1 not cured by instantiating\n",
             (unsigned long long)g.uploads);
    ck_assert_msg(strstr(text, line), "no line \"%s\" in:\n%s", line, text);
    free(text);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_stream_release(s));
    TU_OK(tu.cuMemFree(refused_mem));
}
END_TEST

/* Pipelines launched on two devices (three launches with device 0 current, five with device
 * 1): each format lists both devices with the figures cupool_graph_stats_device_get gives,
 * and the table a line per device. */
START_TEST(graph_devices_in_every_format)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    setenv("FAKECUDA_DEVICES", "2", 1); /* the simulated driver: two devices */
    tu_setup();
    CUcontext ctx[2];
    if (!tu_two_devices("graph_devices_in_every_format", ctx))
        return;
    CUstream s[2];
    CUdeviceptr mem[2];
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        TU_OK(tu.cuStreamCreate(&s[d], CU_STREAM_NON_BLOCKING));
        TU_OK(tu.cuMemAlloc(&mem[d], 64));
        for (int i = 0; i < 3 + 2 * d; i++) {
            TU_OK(cupool_pipeline_reset(p));
            TU_OK(cupool_pipeline_memset(p, mem[d], (unsigned)i, 4, 16, NULL));
            TU_OK(cupool_pipeline_launch(p, s[d]));
        }
        TU_OK(tu.cuStreamSynchronize(s[d]));
    }
    for (int d = 0; d < 2; d++) {
        cupool_graph_stats_t g = device_stats(d);
        ck_assert_uint_eq(g.launches, 3 + 2 * (unsigned)d);
        ck_assert_uint_eq(g.misses, 1);
        ck_assert_uint_eq(g.entries, 1);
    }
    char *text = printed(CUPOOL_STATS_FORMAT_JSON);
    struct jv *doc = json_parse(text);
    json_matches(doc);
    const struct jv *devs = jget(jget(doc, "graph"), "devices");
    ck_assert_uint_eq(devs->n, 2);
    ck_assert_int_eq(jsigned(devs->items[0], "device"), 0);
    ck_assert_uint_eq(jint(devs->items[0], "launches"), 3);
    ck_assert_int_eq(jsigned(devs->items[1], "device"), 1);
    ck_assert_uint_eq(jint(devs->items[1], "launches"), 5);
    jfree(doc);
    free(text);
    text = printed(CUPOOL_STATS_FORMAT_PROMETHEUS);
    struct prom pr;
    prom_parse(text, &pr);
    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&g));
    prom_graph_matches(&pr, &g);
    ck_assert(prom_value(&pr, "cupool_graph_device_launches_total", "device=\"0\"") == 3);
    ck_assert(prom_value(&pr, "cupool_graph_device_launches_total", "device=\"1\"") == 5);
    free(pr.s);
    free(text);
    text = printed(CUPOOL_STATS_FORMAT_TABLE);
    for (int d = 0; d < 2; d++) {
        cupool_graph_stats_t dg = device_stats(d);
        char line[512];
        snprintf(line, sizeof(line),
                 "graph cache, device %d: %llu launches, %llu hits, 1 misses, %llu "
                 "instantiations, %llu updates (%llu nodes), 0 evictions; 1 entries, %llu "
                 "execs, %llu bytes\n",
                 d, (unsigned long long)dg.launches, (unsigned long long)dg.hits,
                 (unsigned long long)dg.instantiations, (unsigned long long)dg.updates,
                 (unsigned long long)dg.nodes_updated, (unsigned long long)dg.execs,
                 (unsigned long long)dg.bytes);
        ck_assert_msg(strstr(text, line), "no line \"%s\" in:\n%s", line, text);
    }
    free(text);
    TU_OK(cupool_pipeline_destroy(p));
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        TU_OK(tu.cuStreamDestroy(s[d]));
        TU_OK(tu.cuMemFree(mem[d]));
    }
}
END_TEST

START_TEST(json_with_no_classes)
{
    tu_setup();
    char *text = printed(CUPOOL_STATS_FORMAT_JSON);
    struct jv *doc = json_parse(text);
    ck_assert_uint_eq(jget(doc, "classes")->n, 0);
    ck_assert_int_eq(jget(doc, "driver")->type, J_STR);
    jfree(doc);
    free(text);
}
END_TEST

/* The expected decoded JSON string of a raw byte string, as cupool writes it (ASCII, a UTF-8
 * character as \u of its code point, any other byte as \ufffd) and the parser decodes it:
 * well-formed UTF-8 as it was, any other byte as U+FFFD. */
static void escaped_as_decoded(const char *raw, char *out, size_t len)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && o + 4 < len; p++) {
        if (*p < 0x80) {
            out[o++] = (char)*p;
        } else if (*p == 0xc3 && p[1] >= 0x80 && p[1] <= 0xbf) { /* the test's two-byte letters */
            out[o++] = (char)*p;
            out[o++] = (char)*++p;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
    }
    out[o] = '\0';
}

/* The driver path is the user's: quotes, backslashes, control and non-ASCII bytes come out
 * escaped (a UTF-8 character as its code point, not byte by byte; a byte that is no UTF-8 as
 * U+FFFD), and the document stays valid ASCII. */
START_TEST(json_escapes_the_driver_path)
{
    const char *driver = getenv("CUPOOL_DRIVER_PATH");
    ck_assert_ptr_nonnull(driver);
    char real[4096];
    ck_assert_ptr_nonnull(realpath(driver, real));
    char dir[] = "/tmp/cupool-json-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char odd[512];
    snprintf(odd, sizeof(odd), "%s/a\"b\\c\td\x01\xc3\xa9\xff\xc3.so", dir);
    ck_assert_int_eq(symlink(real, odd), 0);
    setenv("CUPOOL_DRIVER_PATH", odd, 1);
    tu_setup();
    char *text = printed(CUPOOL_STATS_FORMAT_JSON);
    struct jv *doc = json_parse(text);
    char want[1024];
    escaped_as_decoded(odd, want, sizeof(want));
    ck_assert_str_eq(jstr(doc, "driver"), want);
    jfree(doc);
    free(text);
    unlink(odd);
    rmdir(dir);
}
END_TEST

/* ---- Prometheus ---- */

/* A class retired by cupool_context_release while one of its streams is out is listed beside
 * the new class of the same key: the exposition still has one sample per label set (a scrape
 * with a repeated sample is refused whole), the context_alive label telling the two apart, and
 * the live class's counters never fall when the retired one is reclaimed (a scrape would read
 * a fall as a counter reset). */
START_TEST(prometheus_one_series_per_key_after_context_release)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
    CUstream kept, s;
    for (int i = 0; i < 5; i++) {
        TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
        TU_OK(cupool_stream_release(s));
    }
    TU_OK(cupool_stream_acquire(&kept, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_context_release(tu_ctx)); /* the context stays: it will be used again */
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_stream_release(s));
    cupool_class_stats_t st[8];
    size_t n = all_stats(st, 8);
    ck_assert_uint_eq(n, 2); /* the retired class (one stream out) and the new one */
    ck_assert_int_ne(st[0].context_alive, st[1].context_alive);
    const cupool_class_stats_t *live = st[0].context_alive ? &st[0] : &st[1];
    const cupool_class_stats_t *retired = st[0].context_alive ? &st[1] : &st[0];
    char *text = printed(CUPOOL_STATS_FORMAT_PROMETHEUS);
    struct prom pr;
    memset(&pr, 0, sizeof pr);
    prom_parse(text, &pr); /* refuses a repeated sample */
    char lv[256], rt[256];
    class_labels(live, lv, sizeof(lv));
    class_labels(retired, rt, sizeof(rt));
    ck_assert(prom_value(&pr, "cupool_classes", "") == 2);
    ck_assert(prom_value(&pr, "cupool_class_in_use", rt) == 1);
    ck_assert(prom_value(&pr, "cupool_class_acquires_total", rt) == 6);
    ck_assert(prom_value(&pr, "cupool_class_context_alive", rt) == 0);
    ck_assert(prom_value(&pr, "cupool_class_in_use", lv) == 0);
    double live_acquires = prom_value(&pr, "cupool_class_acquires_total", lv);
    ck_assert(live_acquires == 1);
    free(text);
    free(pr.s);
    /* the retired class's last stream comes back and a trim reclaims it: the live series
     * keeps its count */
    cupool_stream_release(kept); /* of a retired class: its result is not the point here */
    TU_OK(cupool_trim());
    text = printed(CUPOOL_STATS_FORMAT_PROMETHEUS);
    memset(&pr, 0, sizeof pr);
    prom_parse(text, &pr);
    ck_assert(prom_value(&pr, "cupool_class_acquires_total", lv) >= live_acquires);
    free(text);
    free(pr.s);
}
END_TEST

/* The families cupool_graph_device_*: a sample per device that launched through the cache,
 * labelled device="N", each what cupool_graph_stats_device_get says; none for the others. */
static void prom_devices_match(const struct prom *pr)
{
    static const char *const names[] = {
        "cupool_graph_device_launches_total", "cupool_graph_device_hits_total",
        "cupool_graph_device_misses_total", "cupool_graph_device_instantiations_total",
        "cupool_graph_device_updates_total", "cupool_graph_device_nodes_updated_total",
        "cupool_graph_device_evictions_total", "cupool_graph_device_claims_lock_free_total",
        "cupool_graph_device_claims_locked_total", "cupool_graph_device_entries",
        "cupool_graph_device_execs", "cupool_graph_device_bytes",
    };
    size_t used = 0;
    for (int d = 0; d < CUPOOL_STATS_DEVICES; d++) {
        cupool_graph_stats_t g = device_stats(d);
        const uint64_t v[] = {g.launches,       g.hits,          g.misses,
                              g.instantiations, g.updates,       g.nodes_updated,
                              g.evictions,      g.claims_lock_free, g.claims_locked,
                              g.entries,        g.execs,         g.bytes};
        if (!g.launches)
            continue;
        used++;
        char labels[32];
        snprintf(labels, sizeof(labels), "device=\"%d\"", d);
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            ck_assert_msg(prom_value(pr, names[i], labels) == (double)v[i],
                          "%s{%s}: %g, expected %llu", names[i], labels,
                          prom_value(pr, names[i], labels), (unsigned long long)v[i]);
    }
    size_t samples = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        ck_assert_str_eq(prom_type(pr, names[i]), strstr(names[i], "_total") ? "counter" : "gauge");
        for (size_t k = 0; k < pr->n; k++)
            samples += !strcmp(pr->s[k].name, names[i]);
    }
    ck_assert_uint_eq(samples, used * (sizeof(names) / sizeof(names[0])));
}

/* Every graph counter of the exposition against cupool_graph_stats_get(). */
static void prom_graph_matches(const struct prom *pr, const cupool_graph_stats_t *g)
{
    const struct {
        const char *name;
        uint64_t v;
    } m[] = {
        {"cupool_graph_launches_total", g->launches},
        {"cupool_graph_hits_total", g->hits},
        {"cupool_graph_misses_total", g->misses},
        {"cupool_graph_instantiations_total", g->instantiations},
        {"cupool_graph_updates_total", g->updates},
        {"cupool_graph_nodes_updated_total", g->nodes_updated},
        {"cupool_graph_update_failures_total", g->update_failures},
        {"cupool_graph_evictions_total", g->evictions},
        {"cupool_graph_eager_launches_total", g->eager_launches},
        {"cupool_graph_claims_lock_free_total", g->claims_lock_free},
        {"cupool_graph_claims_locked_total", g->claims_locked},
        {"cupool_graph_nodes_compared_total", g->nodes_compared},
        {"cupool_graph_uploads_total", g->uploads},
        {"cupool_graph_update_topology_changed_total", g->update_topology_changed},
        {"cupool_graph_update_node_type_changed_total", g->update_node_type_changed},
        {"cupool_graph_update_function_changed_total", g->update_function_changed},
        {"cupool_graph_update_parameters_changed_total", g->update_parameters_changed},
        {"cupool_graph_update_not_supported_total", g->update_not_supported},
        {"cupool_graph_update_unsupported_function_change_total",
         g->update_unsupported_function_change},
        {"cupool_graph_update_attributes_changed_total", g->update_attributes_changed},
        {"cupool_graph_update_other_total", g->update_other},
        {"cupool_graph_node_update_refusals_total", g->node_update_refusals},
        {"cupool_graph_update_errors_total", g->update_errors},
        {"cupool_graph_entries", g->entries},
        {"cupool_graph_execs", g->execs},
        {"cupool_graph_bytes", g->bytes},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        ck_assert_msg(prom_value(pr, m[i].name, "") == (double)m[i].v, "%s: %g, expected %llu",
                      m[i].name, prom_value(pr, m[i].name, ""), (unsigned long long)m[i].v);
        ck_assert_str_eq(prom_type(pr, m[i].name), strstr(m[i].name, "_total") ? "counter" : "gauge");
    }
    prom_devices_match(pr);
}

START_TEST(prometheus_matches_the_get_functions)
{
    traffic();
    char *text = printed(CUPOOL_STATS_FORMAT_PROMETHEUS);
    struct prom pr;
    prom_parse(text, &pr);
    char labels[256];
    snprintf(labels, sizeof(labels), "version=\"%s\"", cupool_version());
    ck_assert(prom_value(&pr, "cupool_info", labels) == 1);

    cupool_class_stats_t st[16];
    size_t n = all_stats(st, 16);
    ck_assert_uint_eq(n, 2);
    ck_assert(prom_value(&pr, "cupool_classes", "") == (double)n);
    for (size_t i = 0; i < n; i++) {
        const cupool_class_stats_t *s = &st[i];
        class_labels(s, labels, sizeof(labels));
        ck_assert(prom_value(&pr, "cupool_class_acquires_total", labels) == (double)s->acquires);
        ck_assert(prom_value(&pr, "cupool_class_hits_total", labels) == (double)s->hits);
        ck_assert(prom_value(&pr, "cupool_class_releases_total", labels) == (double)s->releases);
        ck_assert(prom_value(&pr, "cupool_class_creates_total", labels) == (double)s->creates);
        ck_assert(prom_value(&pr, "cupool_class_destroys_total", labels) == (double)s->destroys);
        ck_assert(prom_value(&pr, "cupool_class_dropped_total", labels) == (double)s->dropped);
        ck_assert(prom_value(&pr, "cupool_class_idle", labels) == (double)s->idle);
        ck_assert(prom_value(&pr, "cupool_class_in_use", labels) == (double)s->in_use);
        ck_assert(prom_value(&pr, "cupool_class_high_water", labels) == (double)s->high_water);
        ck_assert(prom_value(&pr, "cupool_class_context_alive", labels) == 1);
    }
    /* the traffic: 3 streams acquired, 1 released */
    class_labels(&st[0], labels, sizeof(labels));
    ck_assert_int_eq(st[0].kind, CUPOOL_KIND_STREAM);
    ck_assert(prom_value(&pr, "cupool_class_acquires_total", labels) == 3);
    ck_assert(prom_value(&pr, "cupool_class_in_use", labels) == 2);
    ck_assert_str_eq(prom_type(&pr, "cupool_class_acquires_total"), "counter");
    ck_assert_str_eq(prom_type(&pr, "cupool_class_in_use"), "gauge");
    ck_assert_str_eq(prom_type(&pr, "cupool_class_idle"), "gauge");
    ck_assert_str_eq(prom_type(&pr, "cupool_class_high_water"), "gauge");

    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    TU_OK(cupool_maintenance_stats_get(&m));
    ck_assert(prom_value(&pr, "cupool_maintenance_running", "") == (double)(m.running != 0));
    ck_assert(prom_value(&pr, "cupool_maintenance_wakeups_total", "") == (double)m.wakeups);
    ck_assert(prom_value(&pr, "cupool_maintenance_request_creates_total", "") ==
              (double)m.request_creates);
    ck_assert(prom_value(&pr, "cupool_maintenance_request_destroys_total", "") ==
              (double)m.request_destroys);
    ck_assert(prom_value(&pr, "cupool_maintenance_background_creates_total", "") ==
              (double)m.background_creates);
    ck_assert(prom_value(&pr, "cupool_maintenance_background_destroys_total", "") ==
              (double)m.background_destroys);
    ck_assert(prom_value(&pr, "cupool_maintenance_graph_reaps_total", "") ==
              (double)m.graph_reaps);

    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&g));
    ck_assert(prom_value(&pr, "cupool_graph_launches_total", "") == (double)g.launches);
    ck_assert(prom_value(&pr, "cupool_graph_hits_total", "") == (double)g.hits);
    ck_assert(prom_value(&pr, "cupool_graph_misses_total", "") == (double)g.misses);
    ck_assert(prom_value(&pr, "cupool_graph_entries", "") == (double)g.entries);
    ck_assert(prom_value(&pr, "cupool_graph_execs", "") == (double)g.execs);
    ck_assert(prom_value(&pr, "cupool_graph_bytes", "") == (double)g.bytes);
    ck_assert_str_eq(prom_type(&pr, "cupool_graph_entries"), "gauge");
    ck_assert_str_eq(prom_type(&pr, "cupool_graph_launches_total"), "counter");
    prom_graph_matches(&pr, &g);
    /* info, metadata, classes; 10 per class; 7; 26; 12 per device */
    ck_assert_uint_eq(pr.ntypes, 58);
    free(pr.s);
    free(text);
    for (int i = 0; i < 2; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

START_TEST(prometheus_reader_is_strict)
{
    static const char *const bad[] = {
        "cupool_x 1\n",                                  /* no TYPE */
        "# TYPE cupool_x gauge\ncupool_x{a=1} 1\n",      /* unquoted label value */
        "# TYPE cupool_x gauge\ncupool_x 1",             /* no final newline */
        "# TYPE cupool_x counter\ncupool_x 1\n",         /* a counter not *_total */
        "# TYPE cupool_x gauge\ncupool_x one\n",         /* not a number */
        "# TYPE cupool_x gauge\n# TYPE cupool_x gauge\n" /* two TYPE lines */,
        "# TYPE cupool_x gauge\ncupool_x 1\ncupool_x 2\n", /* a sample repeated */
        "# TYPE x gauge\nx 1\n",                         /* not cupool_ */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct prom pr;
        ck_assert_msg(prom_try(bad[i], &pr) != NULL, "accepted: %s", bad[i]);
        free(pr.s);
    }
    struct prom pr;
    prom_parse("# HELP cupool_a_total x\n# TYPE cupool_a_total counter\n"
               "cupool_a_total{k=\"v\\\"\",l=\"2\"} 3 1700000000\n",
               &pr);
    ck_assert(prom_value(&pr, "cupool_a_total", "k=\"v\\\"\",l=\"2\"") == 3);
    free(pr.s);
}
END_TEST

/* ---- the errors ---- */

START_TEST(print_format_refuses_bad_arguments)
{
    tu_setup();
    TU_EQ(cupool_stats_print_format(NULL, CUPOOL_STATS_FORMAT_JSON), CUDA_ERROR_INVALID_VALUE);
    FILE *f = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(f);
    TU_EQ(cupool_stats_print_format(f, (cupool_stats_format_t)3), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stats_print_format(f, (cupool_stats_format_t)-1), CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_stats_print_format(f, CUPOOL_STATS_FORMAT_TABLE));
    fclose(f);
    /* in a forked child: refused, as every call */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *n = fopen("/dev/null", "w");
        _exit(cupool_stats_print_format(n, CUPOOL_STATS_FORMAT_JSON) == CUDA_ERROR_NOT_PERMITTED
                  ? 0
                  : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

/* ---- the growable structs ---- */

#define GUARD 0xA5
#define SLACK 64

static void assert_guard(const unsigned char *p, size_t from, size_t to, const char *what)
{
    for (size_t i = from; i < to; i++)
        ck_assert_msg(p[i] == GUARD, "%s: byte %zu written (0x%02x)", what, i, p[i]);
}

START_TEST(first_version_size_gets_its_prefix)
{
    traffic();
    /* the first versions' sizes are accepted, and nothing past them is written */
    ck_assert_uint_le(CUPOOL_CLASS_STATS_SIZE_V1, sizeof(cupool_class_stats_t));
    ck_assert_uint_le(CUPOOL_MAINTENANCE_STATS_SIZE_V1, sizeof(cupool_maintenance_stats_t));
    ck_assert_uint_le(CUPOOL_GRAPH_STATS_SIZE_V1, sizeof(cupool_graph_stats_t));
    unsigned char buf[4 * (sizeof(cupool_class_stats_t) + SLACK)];
    size_t v1 = CUPOOL_CLASS_STATS_SIZE_V1;

    /* an array of first-version elements: stride v1, capacity 1 of 2 classes */
    memset(buf, GUARD, sizeof(buf));
    memcpy(buf, &v1, sizeof(v1));
    size_t n = 0;
    TU_OK(cupool_stats_get((cupool_class_stats_t *)(void *)buf, 1, &n));
    ck_assert_uint_eq(n, 2);
    cupool_class_stats_t got;
    memcpy(&got, buf, v1);
    ck_assert_uint_eq(got.size, v1);
    ck_assert_uint_eq(got.acquires, 3);
    ck_assert_uint_eq(got.in_use, 2);
    assert_guard(buf, v1, sizeof(buf), "class stats, first version, capacity 1");

    /* two elements of v1 each: the second at offset v1 */
    memset(buf, GUARD, sizeof(buf));
    memcpy(buf, &v1, sizeof(v1));
    TU_OK(cupool_stats_get((cupool_class_stats_t *)(void *)buf, 2, &n));
    memcpy(&got, buf + v1, v1);
    ck_assert_uint_eq(got.size, v1);
    ck_assert_int_eq(got.kind, CUPOOL_KIND_EVENT);
    assert_guard(buf, 2 * v1, sizeof(buf), "class stats, first version, capacity 2");

    cupool_maintenance_stats_t m;
    unsigned char mb[sizeof(m) + SLACK];
    memset(mb, GUARD, sizeof(mb));
    size_t mv1 = CUPOOL_MAINTENANCE_STATS_SIZE_V1;
    memcpy(mb, &mv1, sizeof(mv1));
    TU_OK(cupool_maintenance_stats_get((cupool_maintenance_stats_t *)(void *)mb));
    memcpy(&m, mb, mv1);
    ck_assert_uint_eq(m.size, mv1);
    ck_assert_uint_gt(m.request_creates, 0);
    assert_guard(mb, mv1, sizeof(mb), "maintenance stats, first version");

    cupool_graph_stats_t g;
    unsigned char gb[sizeof(g) + SLACK];
    memset(gb, GUARD, sizeof(gb));
    size_t gv1 = CUPOOL_GRAPH_STATS_SIZE_V1;
    memcpy(gb, &gv1, sizeof(gv1));
    TU_OK(cupool_graph_stats_get((cupool_graph_stats_t *)(void *)gb));
    memcpy(&g, gb, gv1);
    ck_assert_uint_eq(g.size, gv1);
    ck_assert_uint_eq(g.launches, 0);
    assert_guard(gb, gv1, sizeof(gb), "graph stats, first version");
    for (int i = 0; i < 2; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

/* A caller built against a newer header (a larger struct): cupool fills what it knows, says
 * so in size, and leaves the rest of each element alone. */
START_TEST(larger_size_gets_what_the_library_has)
{
    traffic();
    const size_t stride = sizeof(cupool_class_stats_t) + 24;
    unsigned char buf[3 * (sizeof(cupool_class_stats_t) + 24)];
    memset(buf, GUARD, sizeof(buf));
    memcpy(buf, &stride, sizeof(stride));
    size_t n = 0;
    TU_OK(cupool_stats_get((cupool_class_stats_t *)(void *)buf, 3, &n));
    ck_assert_uint_eq(n, 2);
    for (size_t i = 0; i < 2; i++) {
        cupool_class_stats_t s;
        memcpy(&s, buf + i * stride, sizeof(s));
        ck_assert_uint_eq(s.size, sizeof(s));
        ck_assert_int_eq(s.kind, i == 0 ? CUPOOL_KIND_STREAM : CUPOOL_KIND_EVENT);
        assert_guard(buf + i * stride, sizeof(s), stride, "class stats, newer caller");
    }
    assert_guard(buf, 2 * stride, sizeof(buf), "class stats past the classes");

    unsigned char gb[sizeof(cupool_graph_stats_t) + SLACK];
    memset(gb, GUARD, sizeof(gb));
    size_t big = sizeof(gb);
    memcpy(gb, &big, sizeof(big));
    TU_OK(cupool_graph_stats_get((cupool_graph_stats_t *)(void *)gb));
    size_t said;
    memcpy(&said, gb, sizeof(said));
    ck_assert_uint_eq(said, sizeof(cupool_graph_stats_t));
    assert_guard(gb, sizeof(cupool_graph_stats_t), sizeof(gb), "graph stats, newer caller");

    unsigned char mb[sizeof(cupool_maintenance_stats_t) + SLACK];
    memset(mb, GUARD, sizeof(mb));
    big = sizeof(mb);
    memcpy(mb, &big, sizeof(big));
    TU_OK(cupool_maintenance_stats_get((cupool_maintenance_stats_t *)(void *)mb));
    memcpy(&said, mb, sizeof(said));
    ck_assert_uint_eq(said, sizeof(cupool_maintenance_stats_t));
    assert_guard(mb, sizeof(cupool_maintenance_stats_t), sizeof(mb),
                 "maintenance stats, newer caller");
    for (int i = 0; i < 2; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

START_TEST(too_small_a_size_is_refused)
{
    traffic();
    const size_t small[] = {0, sizeof(size_t), CUPOOL_CLASS_STATS_SIZE_V1 - 1};
    for (size_t k = 0; k < sizeof(small) / sizeof(small[0]); k++) {
        unsigned char buf[2 * sizeof(cupool_class_stats_t)];
        memset(buf, GUARD, sizeof(buf));
        memcpy(buf, &small[k], sizeof(small[k]));
        size_t n = 77;
        TU_EQ(cupool_stats_get((cupool_class_stats_t *)(void *)buf, 2, &n),
              CUDA_ERROR_INVALID_VALUE);
        ck_assert_uint_eq(n, 77);
        assert_guard(buf, sizeof(size_t), sizeof(buf), "refused class stats");
    }
    /* capacity 0 asks for the count only: no size needed */
    size_t n = 0;
    TU_OK(cupool_stats_get(NULL, 0, &n));
    ck_assert_uint_eq(n, 2);

    cupool_maintenance_stats_t m;
    memset(&m, GUARD, sizeof(m));
    m.size = CUPOOL_MAINTENANCE_STATS_SIZE_V1 - 1;
    TU_EQ(cupool_maintenance_stats_get(&m), CUDA_ERROR_INVALID_VALUE);
    assert_guard((unsigned char *)&m, sizeof(size_t), sizeof(m), "refused maintenance stats");
    m.size = 0;
    TU_EQ(cupool_maintenance_stats_get(&m), CUDA_ERROR_INVALID_VALUE);

    cupool_graph_stats_t g;
    memset(&g, GUARD, sizeof(g));
    g.size = CUPOOL_GRAPH_STATS_SIZE_V1 - 1;
    TU_EQ(cupool_graph_stats_get(&g), CUDA_ERROR_INVALID_VALUE);
    assert_guard((unsigned char *)&g, sizeof(size_t), sizeof(g), "refused graph stats");
    ck_assert_msg(strstr(cupool_error_string(), "size"), "%s", cupool_error_string());
    for (int i = 0; i < 2; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

/* cupool_graph_stats_device_get's refusals write nothing: a device outside [0,
 * CUPOOL_STATS_DEVICES), stats NULL, a size below the first version's; a first-version size
 * gets its prefix alone; a device that launched nothing gets zeros; before cupool is
 * initialised it answers all the same. */
START_TEST(graph_device_stats_bad_input)
{
    cupool_graph_stats_t g;
    unsigned char gb[sizeof(g) + SLACK];
    g = (cupool_graph_stats_t)CUPOOL_GRAPH_STATS_INIT;
    g.launches = 99;
    TU_OK(cupool_graph_stats_device_get(0, &g)); /* not initialised yet: never calls the driver */
    ck_assert_uint_eq(g.size, sizeof(g));
    ck_assert_uint_eq(g.launches, 0);
    tu_setup();
    const int bad[] = {-1, CUPOOL_STATS_DEVICES, CUPOOL_STATS_DEVICES + 1, INT_MIN, INT_MAX};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        memset(gb, GUARD, sizeof(gb));
        size_t full = sizeof(g);
        memcpy(gb, &full, sizeof(full));
        TU_EQ(cupool_graph_stats_device_get(bad[k], (cupool_graph_stats_t *)(void *)gb),
              CUDA_ERROR_INVALID_VALUE);
        assert_guard(gb, sizeof(size_t), sizeof(gb), "refused device graph stats");
        ck_assert_msg(strstr(cupool_error_string(), "device"), "%s", cupool_error_string());
    }
    TU_EQ(cupool_graph_stats_device_get(0, NULL), CUDA_ERROR_INVALID_VALUE);
    ck_assert_msg(strstr(cupool_error_string(), "NULL"), "%s", cupool_error_string());
    const size_t small[] = {0, sizeof(size_t), CUPOOL_GRAPH_STATS_SIZE_V1 - 1};
    for (size_t k = 0; k < sizeof(small) / sizeof(small[0]); k++) {
        memset(gb, GUARD, sizeof(gb));
        memcpy(gb, &small[k], sizeof(small[k]));
        TU_EQ(cupool_graph_stats_device_get(0, (cupool_graph_stats_t *)(void *)gb),
              CUDA_ERROR_INVALID_VALUE);
        assert_guard(gb, sizeof(size_t), sizeof(gb), "refused device graph stats");
        ck_assert_msg(strstr(cupool_error_string(), "size"), "%s", cupool_error_string());
    }
    /* a launch on this device: a first-version caller gets its prefix, and nothing past it */
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    CUdeviceptr mem;
    TU_OK(tu.cuMemAlloc(&mem, 64));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    TU_OK(cupool_pipeline_memset(p, mem, 1, 4, 16, NULL));
    TU_OK(cupool_pipeline_launch(p, s));
    TU_OK(cupool_pipeline_launch(p, s));
    TU_OK(tu.cuStreamSynchronize(s));
    memset(gb, GUARD, sizeof(gb));
    size_t gv1 = CUPOOL_GRAPH_STATS_SIZE_V1;
    memcpy(gb, &gv1, sizeof(gv1));
    TU_OK(cupool_graph_stats_device_get(tu_dev, (cupool_graph_stats_t *)(void *)gb));
    memcpy(&g, gb, gv1);
    ck_assert_uint_eq(g.size, gv1);
    ck_assert_uint_eq(g.launches, 2);
    ck_assert_uint_eq(g.misses, 1);
    ck_assert_uint_eq(g.hits, 1);
    ck_assert_uint_eq(g.entries, 1);
    assert_guard(gb, gv1, sizeof(gb), "device graph stats, first version");
    /* a newer caller's larger struct: what the library has, and size says so */
    memset(gb, GUARD, sizeof(gb));
    size_t big = sizeof(gb);
    memcpy(gb, &big, sizeof(big));
    TU_OK(cupool_graph_stats_device_get(tu_dev, (cupool_graph_stats_t *)(void *)gb));
    size_t said;
    memcpy(&said, gb, sizeof(said));
    ck_assert_uint_eq(said, sizeof(g));
    assert_guard(gb, sizeof(g), sizeof(gb), "device graph stats, newer caller");
    /* the last valid ordinal, which launched nothing: zeros */
    g = (cupool_graph_stats_t)CUPOOL_GRAPH_STATS_INIT;
    memset((char *)&g + sizeof(size_t), 0x5a, sizeof(g) - sizeof(size_t));
    TU_OK(cupool_graph_stats_device_get(CUPOOL_STATS_DEVICES - 1, &g));
    cupool_graph_stats_t zero;
    memset(&zero, 0, sizeof(zero));
    zero.size = sizeof(zero);
    ck_assert(memcmp(&g, &zero, sizeof(g)) == 0);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(tu.cuMemFree(mem));
    TU_OK(cupool_stream_release(s));
}
END_TEST

/* ---- the device ---- */

START_TEST(device_of_each_class)
{
    setenv("FAKECUDA_DEVICES", "2", 1); /* the simulated driver: two devices */
    tu_setup();
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    ck_assert_int_eq(tu_stats(CUPOOL_KIND_STREAM, 0).device, tu_dev);
    int count = 0;
    TU_OK(tu.cuDeviceGetCount(&count));
    if (count > 1) {
        /* an explicit pool of a context that is not current: asked with it pushed */
        CUdevice d1;
        CUcontext c1, cur;
        TU_OK(tu.cuDeviceGet(&d1, 1));
        TU_OK(tu.cuDevicePrimaryCtxRetain(&c1, d1));
        cupool_event_pool_t ep;
        TU_OK(cupool_event_pool_get(&ep, c1, CU_EVENT_DISABLE_TIMING));
        TU_OK(tu.cuCtxGetCurrent(&cur));
        ck_assert_ptr_eq(cur, tu_ctx); /* the caller's context is back */
        cupool_class_stats_t e = tu_stats(CUPOOL_KIND_EVENT, CU_EVENT_DISABLE_TIMING);
        ck_assert_int_eq(e.device, d1);
        TU_OK(tu.cuDevicePrimaryCtxRelease(d1));
    }
    TU_OK(cupool_stream_release(s));
}
END_TEST

/* A driver that does not say: the class is made all the same, its device -1. */
START_TEST(device_unknown_when_the_driver_fails)
{
    tu_setup();
    if (!tu_fake.present)
        return;
    tu_fake.fault("cuCtxGetDevice", 0, 1, CUDA_ERROR_INVALID_CONTEXT);
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    tu_fake.fault_clear();
    ck_assert_int_eq(tu_stats(CUPOOL_KIND_STREAM, 0).device, -1);
    /* asked once per class: hits and further acquires do not ask */
    unsigned long before = tu_fake.calls("cuCtxGetDevice");
    for (int i = 0; i < 100; i++) {
        TU_OK(cupool_stream_release(s));
        TU_OK(cupool_stream_acquire(&s, 0, 0));
    }
    ck_assert_uint_eq(tu_fake.calls("cuCtxGetDevice"), before);
    TU_OK(cupool_stream_release(s));
}
END_TEST

/* ---- CUPOOL_STATS at exit ---- */

static void acquire_and_exit(void)
{
    tu_setup();
    CUstream s;
    if (cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS)
        _exit(3);
    exit(0); /* the exit handler writes the statistics */
}

/* Runs acquire_and_exit in a child with CUPOOL_STATS=value; its standard error (free it). */
static char *child_with_stats(const char *value)
{
    char path[] = "/tmp/cupool-stats-err-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("CUPOOL_STATS", value, 1);
        dup2(fd, 2);
        acquire_and_exit();
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    char *buf = calloc(1, (size_t)sb.st_size + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(pread(fd, buf, (size_t)sb.st_size, 0), sb.st_size);
    close(fd);
    return buf;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&buf, &cap, '\0', f);
    fclose(f);
    ck_assert_int_gt(n, 0);
    return buf;
}

START_TEST(json_file_at_exit)
{
    char dir[] = "/tmp/cupool-stats-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char file[256], value[300];
    snprintf(file, sizeof(file), "%s/stats.json", dir);
    snprintf(value, sizeof(value), "json:%s", file);
    char *err = child_with_stats(value);
    ck_assert_str_eq(err, "");
    free(err);
    char *text = slurp(file);
    struct jv *doc = json_parse(text);
    ck_assert_str_eq(jstr(doc, "version"), cupool_version());
    const struct jv *classes = jget(doc, "classes");
    ck_assert_uint_eq(classes->n, 1);
    ck_assert_str_eq(jstr(classes->items[0], "kind"), "stream");
    ck_assert_uint_eq(jint(classes->items[0], "acquires"), 1);
    ck_assert_uint_eq(jint(classes->items[0], "in_use"), 1);
    (void)jget(doc, "graph");
    jfree(doc);
    free(text);

    /* appended: a second run adds a second line, each one object (JSON Lines) */
    err = child_with_stats(value);
    free(err);
    text = slurp(file);
    char *nl = strchr(text, '\n');
    ck_assert_ptr_nonnull(nl);
    *nl = '\0';
    jfree(json_parse(text));
    jfree(json_parse(nl + 1));
    free(text);
    unlink(file);

    /* prometheus:PATH */
    snprintf(file, sizeof(file), "%s/stats.prom", dir);
    snprintf(value, sizeof(value), "prometheus:%s", file);
    err = child_with_stats(value);
    ck_assert_str_eq(err, "");
    free(err);
    text = slurp(file);
    struct prom pr;
    prom_parse(text, &pr);
    ck_assert(prom_value(&pr, "cupool_classes", "") == 1);
    free(pr.s);
    free(text);
    /* replaced, not appended: a second run leaves one exposition (a scrape of an appended
     * file would find every sample twice and refuse it), written beside it and renamed over
     * it, so no temporary file is left */
    free(child_with_stats(value));
    text = slurp(file);
    memset(&pr, 0, sizeof pr);
    prom_parse(text, &pr);
    ck_assert(prom_value(&pr, "cupool_classes", "") == 1);
    free(pr.s);
    free(text);
    unlink(file);
    ck_assert_int_eq(rmdir(dir), 0); /* empty: nothing but the exposition was there */
    ck_assert_int_eq(mkdir(dir, 0700), 0);

    /* table:PATH: the table, as a bare path gives */
    snprintf(file, sizeof(file), "%s/stats.txt", dir);
    snprintf(value, sizeof(value), "table:%s", file);
    free(child_with_stats(value));
    text = slurp(file);
    ck_assert_msg(strstr(text, "statistics") && strstr(text, "\nstream "), "%s", text);
    free(text);
    unlink(file);
    rmdir(dir);
}
END_TEST

START_TEST(json_to_stderr_at_exit)
{
    /* a format alone goes to standard error (not to a file named json) */
    char *err = child_with_stats("json");
    ck_assert_int_eq(access("json", F_OK), -1);
    struct jv *doc = json_parse(err);
    ck_assert_uint_eq(jget(doc, "classes")->n, 1);
    jfree(doc);
    free(err);
    err = child_with_stats("prometheus");
    struct prom pr;
    prom_parse(err, &pr);
    free(pr.s);
    free(err);
}
END_TEST

START_TEST(bad_stats_values_at_exit)
{
    /* one line naming the problem; statistics off, nothing else written */
    char *err = child_with_stats("json:");
    ck_assert_str_eq(err, "cupool: CUPOOL_STATS=\"json:\" is not valid: nothing after the colon "
                          "(expected json:stderr, json:stdout or json:PATH); statistics are not "
                          "printed\n");
    free(err);
    err = child_with_stats("foo:bar");
    ck_assert_msg(strstr(err, "CUPOOL_STATS=\"foo:bar\" is not valid: \"foo\" is not a format"),
                  "%s", err);
    ck_assert_ptr_null(strchr(strchr(err, '\n') + 1, '\n'));
    free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("formats");
    tcase_add_test(tc, json_parser_is_strict);
    tcase_add_test(tc, prometheus_reader_is_strict);
    tcase_add_test(tc, json_matches_the_get_functions);
    tcase_add_test(tc, json_of_graph_launches);
    tcase_add_test(tc, json_with_no_classes);
    tcase_add_test(tc, prometheus_matches_the_get_functions);
    tcase_add_test(tc, prometheus_one_series_per_key_after_context_release);
    tcase_add_test(tc, print_format_refuses_bad_arguments);
    tcase_add_test(tc, graph_devices_in_every_format);
    if (!tu_real()) { /* a driver at a path of the test's choosing; its controls */
        tcase_add_test(tc, json_escapes_the_driver_path);
        tcase_add_test(tc, graph_refusals_in_every_format);
    }
    suite_add_tcase(s, tc);
    TCase *abi = tcase_create("sizes");
    tcase_add_test(abi, first_version_size_gets_its_prefix);
    tcase_add_test(abi, larger_size_gets_what_the_library_has);
    tcase_add_test(abi, too_small_a_size_is_refused);
    tcase_add_test(abi, graph_device_stats_bad_input);
    tcase_add_test(abi, device_of_each_class);
    tcase_add_test(abi, device_unknown_when_the_driver_fails);
    suite_add_tcase(s, abi);
    TCase *env = tcase_create("environment");
    tcase_add_test(env, json_file_at_exit);
    tcase_add_test(env, json_to_stderr_at_exit);
    tcase_add_test(env, bad_stats_values_at_exit);
    suite_add_tcase(s, env);
    return tu_run(s);
}

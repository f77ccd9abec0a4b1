/* SPDX-License-Identifier: MIT */
/* The CUPOOL_* parser, through the internal entry point (no process environment involved),
 * plus a fuzz run of random and malformed values. */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/error.h"

struct lines {
    char text[32][400];
    int n;
};

static void collect(const char *line, void *arg)
{
    struct lines *l = arg;
    ck_assert_msg(strchr(line, '\n') == NULL, "report lines carry no newline: %s", line);
    if (l->n < 32)
        snprintf(l->text[l->n], sizeof(l->text[0]), "%s", line);
    l->n++;
}

static int parse(struct cupool__config *cfg, struct lines *l, bool secure, ...)
{
    char *env[32];
    int n = 0;
    va_list ap;
    va_start(ap, secure);
    for (char *e; n < 31 && (e = va_arg(ap, char *)) != NULL;)
        env[n++] = e;
    va_end(ap);
    env[n] = NULL;
    memset(l, 0, sizeof(*l));
    return cupool__config_parse(cfg, env, secure, collect, l);
}

START_TEST(defaults)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "PATH=/bin", "CUPOOLX=1", NULL), 0);
    ck_assert_uint_eq(c.magazine_size, 16);
    ck_assert_uint_eq(c.stream_idle_max, 4096);
    ck_assert_uint_eq(c.event_idle_max, 16384);
    ck_assert_uint_eq(c.decay_ms, 10000);
    ck_assert_uint_eq(c.headroom_percent, 100);
    ck_assert(c.background);
    ck_assert_uint_eq(c.stream_prewarm, 0);
    ck_assert_uint_eq(c.event_prewarm, 0);
    ck_assert(!c.disable);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    ck_assert_int_eq(c.log_level, CUPOOL_LOG_WARN);
    ck_assert_str_eq(c.driver_path, "libcuda.so.1");
    ck_assert(c.graph_upload);
    ck_assert_int_eq(l.n, 0);
}
END_TEST

START_TEST(valid_values)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_MAGAZINE_SIZE=1024", "CUPOOL_STREAM_IDLE_MAX=0",
                           "CUPOOL_EVENT_IDLE_MAX=1000000", "CUPOOL_DISABLE=Yes",
                           "CUPOOL_STATS=/tmp/s.txt", "CUPOOL_LOG=debug",
                           "CUPOOL_DRIVER_PATH=/opt/x/libcuda.so.1", "CUPOOL_EVENT_PREWARM=7",
                           "CUPOOL_DECAY_MS=0", "CUPOOL_BACKGROUND=off", NULL),
                     0);
    ck_assert_uint_eq(c.magazine_size, 1024);
    ck_assert_uint_eq(c.stream_idle_max, 0);
    ck_assert_uint_eq(c.event_idle_max, 1000000);
    ck_assert_uint_eq(c.event_prewarm, 7);
    ck_assert_uint_eq(c.decay_ms, 0);
    ck_assert(!c.background);
    ck_assert(c.disable);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    ck_assert_str_eq(c.stats_path, "/tmp/s.txt");
    ck_assert_int_eq(c.log_level, CUPOOL_LOG_DEBUG);
    ck_assert_str_eq(c.driver_path, "/opt/x/libcuda.so.1");
    parse(&c, &l, false, "CUPOOL_STATS=1", "CUPOOL_LOG=0", "CUPOOL_DISABLE=off", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    ck_assert_int_eq(c.log_level, CUPOOL_LOG_NONE);
    ck_assert(!c.disable);
    parse(&c, &l, false, "CUPOOL_STATS=stderr", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    /* standard output by name, never a file named "stdout" */
    parse(&c, &l, false, "CUPOOL_STATS=stdout", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDOUT);
    parse(&c, &l, false, "CUPOOL_STATS=./stdout", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    parse(&c, &l, false, "CUPOOL_STATS=", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    /* boolean words: never taken as a file named "yes" */
    parse(&c, &l, false, "CUPOOL_STATS=yes", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    parse(&c, &l, false, "CUPOOL_STATS=On", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    parse(&c, &l, false, "CUPOOL_STATS=false", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    ck_assert_int_eq(l.n, 0);
}
END_TEST

START_TEST(bad_values_keep_defaults)
{
    struct cupool__config c;
    struct lines l;
    static const char *const bad[] = {"", "abc", "-1", "+5", " 5", "5 ", "0x10", "1e3", "0",
                                      "1025", "99999999999999999999999", "3.5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char entry[128];
        snprintf(entry, sizeof(entry), "CUPOOL_MAGAZINE_SIZE=%s", bad[i]);
        ck_assert_int_eq(parse(&c, &l, false, entry, NULL), 1);
        ck_assert_uint_eq(c.magazine_size, 16);
        ck_assert_int_eq(l.n, 1);
        ck_assert_msg(strstr(l.text[0], "CUPOOL_MAGAZINE_SIZE=\"") == l.text[0], "%s", l.text[0]);
        ck_assert_msg(strstr(l.text[0], "expected an integer from 1 to 1024; using the default 16"),
                      "%s", l.text[0]);
    }
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_DISABLE=2", "CUPOOL_LOG=loud", "CUPOOL_DRIVER_PATH=", NULL), 3);
    ck_assert(!c.disable);
    ck_assert_int_eq(c.log_level, CUPOOL_LOG_WARN);
    ck_assert_str_eq(c.driver_path, "libcuda.so.1");
    ck_assert_msg(strstr(l.text[0], "expected 1, 0, true, false, yes, no, on or off; using the default 0"), "%s", l.text[0]);
    ck_assert_msg(strstr(l.text[1], "none, error, warn, info or debug"), "%s", l.text[1]);
    ck_assert_msg(strstr(l.text[2], "using the default libcuda.so.1"), "%s", l.text[2]);
    /* CUPOOL_GRAPH_UPLOAD: 0 turns the upload at instantiation off; a bad value is one line
     * and the default (on) */
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_GRAPH_UPLOAD=0", NULL), 0);
    ck_assert(!c.graph_upload);
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_GRAPH_UPLOAD=later", NULL), 1);
    ck_assert(c.graph_upload);
    ck_assert_int_eq(l.n, 1);
    ck_assert_msg(strstr(l.text[0], "CUPOOL_GRAPH_UPLOAD=\"later\"") == l.text[0] &&
                      strstr(l.text[0], "using the default 1"),
                  "%s", l.text[0]);
}
END_TEST

/* Byte counts take a unit: K, M, G, T (powers of 1024), optionally with B or iB. */
START_TEST(byte_counts_take_units)
{
    struct cupool__config c;
    struct lines l;
    static const struct {
        const char *value;
        uint64_t bytes;
    } good[] = {{"0", 0},
                {"4096", 4096},
                {"64K", 64ull << 10},
                {"64KiB", 64ull << 10},
                {"512M", 512ull << 20},
                {"512m", 512ull << 20},
                {"512MB", 512ull << 20},
                {"1G", 1ull << 30},
                {"3g", 3ull << 30},
                {"2T", 2ull << 40},
                {"256T", 256ull << 40}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char entry[128];
        snprintf(entry, sizeof(entry), "CUPOOL_GRAPH_CACHE_BYTES=%s", good[i].value);
        ck_assert_int_eq(parse(&c, &l, false, entry, NULL), 0);
        ck_assert_uint_eq(c.graph_cache_bytes, good[i].bytes);
    }
    static const char *const bad[] = {"", "M", "1.5G", "1 G", "1G ", "-1G", "+1G", "1X", "1GiBs",
                                      "1KM", "1Gb2", "257T", "99999999999999999999999K",
                                      "18446744073709551615K"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char entry[128];
        snprintf(entry, sizeof(entry), "CUPOOL_GRAPH_CACHE_BYTES=%s", bad[i]);
        ck_assert_int_eq(parse(&c, &l, false, entry, NULL), 1);
        ck_assert_uint_eq(c.graph_cache_bytes, 256ull << 20);
        ck_assert_msg(strstr(l.text[0], "expected a byte count from 0 to 281474976710656") &&
                          strstr(l.text[0], "using the default 268435456"),
                      "%s: %s", bad[i], l.text[0]);
    }
}
END_TEST

/* The headroom is 0 to 100 percent of the demand's swing (beyond 100 a refill's own lift of
 * the depot would count for too much of the next swing): 0 and 100 are taken, 101 is not. */
START_TEST(headroom_percent_range)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_HEADROOM_PERCENT=0", NULL), 0);
    ck_assert_uint_eq(c.headroom_percent, 0);
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_HEADROOM_PERCENT=100", NULL), 0);
    ck_assert_uint_eq(c.headroom_percent, 100);
    static const char *const bad[] = {"101", "1000", "-1", "25%", "", "quarter"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char entry[64];
        snprintf(entry, sizeof(entry), "CUPOOL_HEADROOM_PERCENT=%s", bad[i]);
        ck_assert_int_eq(parse(&c, &l, false, entry, NULL), 1);
        ck_assert_uint_eq(c.headroom_percent, 100);
        ck_assert_msg(strstr(l.text[0], "expected an integer from 0 to 100; using the default 100"),
                      "%s", l.text[0]);
    }
}
END_TEST

START_TEST(bad_value_after_good_one_uses_default)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_MAGAZINE_SIZE=1", "CUPOOL_MAGAZINE_SIZE=5000", NULL), 1);
    ck_assert_msg(strstr(l.text[0], "using the default 16"), "%s", l.text[0]);
    ck_assert_uint_eq(c.magazine_size, 16); /* as the message says */
}
END_TEST

START_TEST(unknown_names_suggest_nearest)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_MAGAZINE_SIZ=4", "CUPOOL_STREAMS_IDLE_MAX=1",
                           "CUPOOL_DRIVERPATH=x", "CUPOOL_=", NULL),
                     4);
    ck_assert_str_eq(l.text[0],
                     "unknown variable CUPOOL_MAGAZINE_SIZ ignored (did you mean CUPOOL_MAGAZINE_SIZE?)");
    ck_assert_msg(strstr(l.text[1], "did you mean CUPOOL_STREAM_IDLE_MAX?"), "%s", l.text[1]);
    ck_assert_msg(strstr(l.text[2], "did you mean CUPOOL_DRIVER_PATH?"), "%s", l.text[2]);
    ck_assert_uint_eq(c.magazine_size, 16);
    ck_assert_str_eq(cupool__config_nearest("CUPOOL_STAT"), "CUPOOL_STATS");
    /* a name missing its last word: CUPOOL_DECAY_MS is nearer by edit distance */
    ck_assert_str_eq(cupool__config_nearest("CUPOOL_HEADROOM"), "CUPOOL_HEADROOM_PERCENT");
}
END_TEST

START_TEST(python_package_variables_left_alone)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_PY_FORCE_CTYPES=1", "CUPOOL_PY_LIBRARY=/x.so",
                           "CUPOOL_PY=1", NULL),
                     1);
    ck_assert_msg(strstr(l.text[0], "unknown variable CUPOOL_PY ignored"), "%s", l.text[0]);
}
END_TEST

START_TEST(secure_process_ignores_paths)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, true, "CUPOOL_DRIVER_PATH=/tmp/evil.so", "CUPOOL_STATS=/etc/x",
                           "CUPOOL_STATS_X=1", NULL),
                     3);
    ck_assert_str_eq(c.driver_path, "libcuda.so.1");
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    ck_assert_msg(strstr(l.text[0], "setuid or setgid"), "%s", l.text[0]);
    ck_assert_msg(strstr(l.text[1], "setuid or setgid"), "%s", l.text[1]);
    /* stderr statistics take no path and stay allowed */
    parse(&c, &l, true, "CUPOOL_STATS=stderr", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
}
END_TEST

START_TEST(stats_formats)
{
    struct cupool__config c;
    struct lines l;
    /* a format alone: to standard error (never a file named "json") */
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_STATS=json", NULL), 0);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_JSON);
    parse(&c, &l, false, "CUPOOL_STATS=Prometheus", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_PROMETHEUS);
    parse(&c, &l, false, "CUPOOL_STATS=table", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_TABLE);
    parse(&c, &l, false, "CUPOOL_STATS=stderr", NULL);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_TABLE);
    /* FORMAT:PATH, FORMAT:stdout, FORMAT:stderr */
    parse(&c, &l, false, "CUPOOL_STATS=json:/tmp/s.json", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_JSON);
    ck_assert_str_eq(c.stats_path, "/tmp/s.json");
    parse(&c, &l, false, "CUPOOL_STATS=prometheus:metrics.prom", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_PROMETHEUS);
    ck_assert_str_eq(c.stats_path, "metrics.prom");
    parse(&c, &l, false, "CUPOOL_STATS=table:/tmp/t.txt", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_TABLE);
    ck_assert_str_eq(c.stats_path, "/tmp/t.txt");
    parse(&c, &l, false, "CUPOOL_STATS=json:stdout", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDOUT);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_JSON);
    parse(&c, &l, false, "CUPOOL_STATS=prometheus:stderr", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_PROMETHEUS);
    /* after a format a word is a path: json:0 is a file named "0" */
    parse(&c, &l, false, "CUPOOL_STATS=json:0", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    ck_assert_str_eq(c.stats_path, "0");
    /* a colon after a first component that is not a word belongs to the path */
    parse(&c, &l, false, "CUPOOL_STATS=/tmp/a:b", NULL);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_FILE);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_TABLE);
    ck_assert_str_eq(c.stats_path, "/tmp/a:b");
    parse(&c, &l, false, "CUPOOL_STATS=./foo:bar", NULL);
    ck_assert_str_eq(c.stats_path, "./foo:bar");
    ck_assert_int_eq(l.n, 0);
}
END_TEST

START_TEST(stats_bad_formats)
{
    struct cupool__config c;
    struct lines l;
    /* an empty path: one line, statistics off (the default) */
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_STATS=json:", NULL), 1);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    ck_assert_str_eq(l.text[0], "CUPOOL_STATS=\"json:\" is not valid: nothing after the colon "
                                "(expected json:stderr, json:stdout or json:PATH); statistics "
                                "are not printed");
    /* an unknown format, even after a good value */
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_STATS=json:/tmp/x", "CUPOOL_STATS=foo:bar", NULL),
                     1);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    ck_assert_int_eq(c.stats_format, CUPOOL_STATS_FORMAT_TABLE);
    ck_assert_str_eq(c.stats_path, "");
    ck_assert_msg(strstr(l.text[0], "CUPOOL_STATS=\"foo:bar\" is not valid: \"foo\" is not a "
                                    "format (expected table, json or prometheus before the colon"),
                  "%s", l.text[0]);
    ck_assert_msg(strstr(l.text[0], "./foo:bar"), "%s", l.text[0]);
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_STATS=prometheus:", "CUPOOL_STATS=JSON:", NULL),
                     2);
    /* setuid: the path part is ignored, the streams stay allowed */
    ck_assert_int_eq(parse(&c, &l, true, "CUPOOL_STATS=json:/etc/x", NULL), 1);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_OFF);
    ck_assert_msg(strstr(l.text[0], "setuid or setgid"), "%s", l.text[0]);
    ck_assert_int_eq(parse(&c, &l, true, "CUPOOL_STATS=json", NULL), 0);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDERR);
    ck_assert_int_eq(parse(&c, &l, true, "CUPOOL_STATS=prometheus:stdout", NULL), 0);
    ck_assert_int_eq(c.stats_mode, CUPOOL_STATS_STDOUT);
}
END_TEST

START_TEST(prewarm_clamped_to_cap)
{
    struct cupool__config c;
    struct lines l;
    ck_assert_int_eq(parse(&c, &l, false, "CUPOOL_STREAM_PREWARM=100", "CUPOOL_STREAM_IDLE_MAX=10", NULL), 1);
    ck_assert_uint_eq(c.stream_prewarm, 10);
    ck_assert_msg(strstr(l.text[0], "prewarming 10"), "%s", l.text[0]);
}
END_TEST

START_TEST(values_quoted_safely)
{
    struct cupool__config c;
    struct lines l;
    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    char entry[5100];
    snprintf(entry, sizeof(entry), "CUPOOL_LOG=%s", big);
    parse(&c, &l, false, entry, "CUPOOL_MAGAZINE_SIZE=\x01\x7f\"\\", NULL);
    ck_assert_int_eq(l.n, 2);
    ck_assert_msg(strstr(l.text[0], "...") && strlen(l.text[0]) < 300, "%s", l.text[0]);
    ck_assert_msg(strstr(l.text[1], "\\x01\\x7f\\x22\\x5c"), "%s", l.text[1]);
}
END_TEST

/* Random names and values: never a crash, exactly one line per bad entry, every line names
 * its variable, valid values always taken. */
START_TEST(fuzz)
{
    static const char *const names[] = {"CUPOOL_MAGAZINE_SIZE", "CUPOOL_STREAM_IDLE_MAX",
                                        "CUPOOL_EVENT_IDLE_MAX", "CUPOOL_STREAM_PREWARM",
                                        "CUPOOL_EVENT_PREWARM", "CUPOOL_DISABLE", "CUPOOL_STATS",
                                        "CUPOOL_DRIVER_PATH", "CUPOOL_LOG", "CUPOOL_BOGUS"};
    unsigned int seed = 12345;
    const char *iters_env = getenv("CUPOOLTEST_FUZZ_ITERS");
    long iters = iters_env ? atol(iters_env) : 20000;
    for (long it = 0; it < iters; it++) {
        char value[64];
        int len = rand_r(&seed) % 12;
        for (int i = 0; i < len; i++) {
            int r = rand_r(&seed) % 4;
            value[i] = r == 0 ? (char)('0' + rand_r(&seed) % 10)
                     : r == 1 ? (char)(1 + rand_r(&seed) % 255)
                     : r == 2 ? "-+ x.eyo/"[rand_r(&seed) % 9]
                              : (char)('a' + rand_r(&seed) % 26);
        }
        value[len] = '\0';
        const char *name = names[rand_r(&seed) % 10];
        char entry[128];
        snprintf(entry, sizeof(entry), "%s=%s", name, value);
        struct cupool__config c;
        struct lines l;
        int problems = parse(&c, &l, rand_r(&seed) % 2, entry, NULL);
        ck_assert_int_le(problems, 1);
        ck_assert_int_eq(problems, l.n);
        if (problems)
            ck_assert_msg(strstr(l.text[0], name) != NULL || !strcmp(name, "CUPOOL_BOGUS"), "%s",
                          l.text[0]);
        ck_assert_uint_ge(c.magazine_size, 1);
        ck_assert_uint_le(c.magazine_size, 1024);
        ck_assert_uint_le(c.stream_prewarm, c.stream_idle_max);
        ck_assert_int_ge(c.log_level, 0);
        ck_assert_int_le(c.log_level, 4);
        ck_assert(memchr(c.driver_path, 0, sizeof(c.driver_path)) != NULL);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, valid_values);
    tcase_add_test(tc, bad_values_keep_defaults);
    tcase_add_test(tc, byte_counts_take_units);
    tcase_add_test(tc, unknown_names_suggest_nearest);
    tcase_add_test(tc, python_package_variables_left_alone);
    tcase_add_test(tc, bad_value_after_good_one_uses_default);
    tcase_add_test(tc, headroom_percent_range);
    tcase_add_test(tc, secure_process_ignores_paths);
    tcase_add_test(tc, stats_formats);
    tcase_add_test(tc, stats_bad_formats);
    tcase_add_test(tc, prewarm_clamped_to_cap);
    tcase_add_test(tc, values_quoted_safely);
    tcase_add_test(tc, fuzz);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* SPDX-License-Identifier: MIT */
#include "base/internal.h"
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cupool__log_level = CUPOOL_LOG_WARN;

/* The calling thread's last message. Dynamic TLS (the default model, not initial-exec), so
 * it costs the library no static TLS: it can still be loaded with dlopen() late. Its block is
 * set up by the C library on the thread's first failure, without any lock of cupool's. */
static __thread char thread_message[CUPOOL_ERRMSG_MAX];

CUresult cupool__fail(CUresult result, const char *fmt, ...)
{
    char *buf = thread_message;
    char tmp[CUPOOL_ERRMSG_MAX - 48]; /* leaves room for " (<result name>)" */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        snprintf(tmp, sizeof(tmp), "error %d", (int)result);
    snprintf(buf, CUPOOL_ERRMSG_MAX, "%s (%s)", tmp, cupool_result_name(result));
    cupool__log(CUPOOL_LOG_DEBUG, "%s", buf);
    return result;
}

const char *cupool_error_string(void)
{
    return thread_message[0] ? thread_message : "no error";
}

void cupool__log(int level, const char *fmt, ...)
{
    if (level > cupool__log_level)
        return;
    char line[512];
    int off = snprintf(line, sizeof(line), "cupool: ");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + off, sizeof(line) - (size_t)off - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = strlen(line);
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

const char *cupool_result_name(CUresult result)
{
    switch ((int)result) {
#define X(name, value) \
    case value: return #name;
#include "base/result_names.h"
#undef X
    default: return "CUDA_ERROR_UNKNOWN_CODE";
    }
}

const char *cupool_version(void)
{
    return CUPOOL_VERSION_STRING;
}

/* SPDX-License-Identifier: MIT */
/*
 * Initialisation, exit and fork. The atexit and pthread_atfork handlers are registered at the
 * first initialisation, the atexit one right after cuInit, so it runs before the exit
 * handlers of the driver and of anything initialised later (the CUDA runtime's teardown among
 * them when cupool was used first). At exit cupool stops calling the driver and leaks what it
 * holds (CUPOOL_DESTROY_ON_EXIT=1 destroys the idle handles first): a driver being torn down
 * can crash or hang on a destroy, and the process is about to release everything anyway.
 * dlclose() of the library destroys its idle handles and frees all its memory.
 */
#include "base/internal.h"
#include "base/lifecycle.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/layer.h"
#include "base/sync.h"
#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>



static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static char init_message[CUPOOL_ERRMSG_MAX] = "not initialised";

/* Opens the CUPOOL_STATS file for appending without ever blocking the exit: O_NONBLOCK, so
 * a FIFO without a reader fails at once (ENXIO) instead of waiting for one; a regular file
 * then gets ordinary blocking writes again. Never follows a symbolic link: the path comes from
 * the environment, and the process may run with more privilege than whoever set it. */
static FILE *stats_file_open(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) {
        cupool__log(CUPOOL_LOG_WARN, "CUPOOL_STATS: cannot open %s: %s%s", path, strerror(errno),
                    errno == ENXIO ? " (a FIFO with no reader: statistics not written)" : "");
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    FILE *f = fdopen(fd, "a");
    if (!f)
        close(fd);
    return f;
}

/* Writes a Prometheus exposition over the regular file at path (or a new one) at once: into
 * PATH.tmp.PID beside it, then rename(2), so a reader (a textfile collector) sees the old
 * exposition or the new one, never a part, and processes sharing the path leave the last
 * one's whole. False when the path is there but no regular file or symbolic link (a FIFO, a
 * device): the caller writes to it as to any file. A symbolic link is replaced, not followed. */
static bool stats_replace(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return false;
    char tmp[CUPOOL_PATH_MAX + 32];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        cupool__log(CUPOOL_LOG_WARN, "CUPOOL_STATS: %s: path too long", path);
        return true;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        cupool__log(CUPOOL_LOG_WARN, "CUPOOL_STATS: cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return true;
    }
    (void)cupool__layers_report(f, CUPOOL_STATS_FORMAT_PROMETHEUS);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed || rename(tmp, path) != 0) {
        cupool__log(CUPOOL_LOG_WARN, "CUPOOL_STATS: writing %s failed: %s", path, strerror(errno));
        unlink(tmp);
    }
    return true;
}

/* CUPOOL_STATS at exit or unload, in its format: stderr, stdout, or appended to a file (a
 * Prometheus exposition replaces a regular file's content: stats_replace). A
 * write that cannot proceed at once on a pipe or FIFO (its reader stopped reading) fails: exit
 * never waits for it. */
static void print_stats_at_exit(void)
{
    int mode = cupool__cfg.stats_mode;
    if (mode == CUPOOL_STATS_STDERR || mode == CUPOOL_STATS_STDOUT) {
        FILE *out = mode == CUPOOL_STATS_STDERR ? stderr : stdout;
        (void)cupool__layers_report(out, (cupool_stats_format_t)cupool__cfg.stats_format);
        fflush(out);
        return;
    }
    if (mode != CUPOOL_STATS_FILE)
        return;
    /* an appended exposition repeats its samples, which a scrape refuses: replaced */
    if (cupool__cfg.stats_format == CUPOOL_STATS_FORMAT_PROMETHEUS &&
        stats_replace(cupool__cfg.stats_path))
        return;
    FILE *f = stats_file_open(cupool__cfg.stats_path);
    if (!f)
        return;
    (void)cupool__layers_report(f, (cupool_stats_format_t)cupool__cfg.stats_format);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed)
        cupool__log(CUPOOL_LOG_WARN, "CUPOOL_STATS: writing %s failed: %s", cupool__cfg.stats_path,
                    strerror(errno));
}

/* Leaves RUNNING (or whatever the state was) for `next`, then waits for the driver calls other
 * threads have in flight. Returns the state left. */
/* The Itanium C++ ABI's registration, which glibc's atexit() itself uses: naming this
 * library's __dso_handle ties the handler to the library, so dlclose() removes it. (A
 * sanitizer's atexit() interceptor drops that tie: the handler would then be called after
 * the library was unmapped.) */
extern void *__dso_handle;
extern int __cxa_atexit(void (*fn)(void *), void *arg, void *dso);

/* Set by the exit handlers: the destructor then knows the process is ending (at dlclose()
 * the destructor runs before the library's exit handlers, so it finds this unset). */
static _Atomic bool process_exiting;

/* Moves to `next` and waits for other threads' driver calls in flight. Returns the state
 * left. */
static int leave_state(int next)
{
    int prev = atomic_exchange(&cupool__hot.state, next);
    cupool__driver_quiesce();
    return prev;
}

/* Destroys idle handles while the driver still answers (the layers' close hooks). Not when
 * this thread was interrupted inside a driver call of its own (exit() from a signal handler):
 * the driver may hold a lock the call needs. */
static void close_pools(int prev, bool all_threads)
{
    if (prev != CUPOOL_ST_RUNNING && prev != CUPOOL_ST_PASSTHROUGH)
        return;
    if (cupool__self && atomic_load_explicit(&cupool__self->in_driver, CUPOOL_RELAXED) != 0)
        return;
    cupool__closer = true;
    cupool__layers_close(all_threads);
    cupool__closer = false;
}

/*
 * Process exit (exit(), return from main, quick_exit()). From here on cupool calls no driver
 * function (other threads' calls in flight are waited for): handles are left to the process's
 * end, unless CUPOOL_DESTROY_ON_EXIT=1 asks to destroy the idle ones now (`may_destroy`: only
 * from the handler registered after cuInit, which runs before the driver's own).
 */
static void exit_transition(bool may_destroy)
{
    atomic_store(&process_exiting, true);
    int st = cupool__state_now();
    if (st == CUPOOL_ST_FORKED || st == CUPOOL_ST_UNLOADED || st == CUPOOL_ST_EXITING)
        return;
    int prev = leave_state(CUPOOL_ST_EXITING);
    cupool__layers_stop(false); /* not joined: it calls the driver no more, and the process ends */
    if (may_destroy && cupool__cfg.destroy_on_exit)
        close_pools(prev, false);
    if (prev != CUPOOL_ST_UNINIT)
        print_stats_at_exit();
}

/* Registered right after the first successful cuInit: exit handlers run last-registered
 * first, so this one runs before the driver's, which cuInit registered; handlers registered
 * after it (by code initialised later, such as the CUDA runtime when it started after
 * cupool) run before it. */
static void at_exit(void)
{
    exit_transition(true);
}

/* Registered at the library's first use (cupool__exit_marker_register): whatever happens
 * then (initialisation still in progress, or failed and being retried, at exit), the
 * destructor can tell the process is ending. Runs late in exit, possibly after the driver's
 * teardown: it never calls the driver. */
static void at_exit_marker(void *arg)
{
    (void)arg;
    exit_transition(false);
}

/*
 * The library's destructor. At process exit it runs after the exit handlers: other threads
 * may still be running, so it only removes the thread-exit hook. Otherwise this is dlclose():
 * no thread may be inside the library (the caller's duty), so every idle handle is destroyed
 * (if the driver still answers), every byte freed, the driver reference dropped. Handles
 * callers still hold stay theirs: they are neither destroyed nor tracked any more. In a
 * forked child nothing is freed: a lock may have been held by a parent thread at fork().
 */
__attribute__((destructor)) static void at_unload(void)
{
    if (atomic_load(&process_exiting) || cupool__state_now() == CUPOOL_ST_FORKED) {
        atomic_store(&cupool__hot.state, CUPOOL_ST_UNLOADED);
        cupool__layers_unload();
        return;
    }
    int prev = leave_state(CUPOOL_ST_UNLOADED);
    cupool__layers_stop(true); /* joined: its code and memory are about to go */
    close_pools(prev, true);
    if (prev != CUPOOL_ST_UNINIT)
        print_stats_at_exit();
    cupool__layers_unload();
    cupool__alloc_release_all();
    cupool__driver_unload();
    cupool__sync_unload();
}


/* Registers at_exit_marker once, at the library's first use: after the program's start-up
 * registered the dynamic linker's finaliser, so at exit the marker runs before any
 * destructor. (A constructor would be too early for a library loaded with the program: its
 * exit handlers would then run after the destructors.) */
void cupool__exit_marker_register(void)
{
    static _Atomic bool registered;
    if (atomic_load_explicit(&registered, CUPOOL_RELAXED) || atomic_exchange(&registered, true))
        return;
    __cxa_atexit(at_exit_marker, NULL, &__dso_handle);
}

/* Failures that another attempt cannot cure: no driver library, the stub, a library that is
 * not a driver or too old, no usable device. Anything else (out of memory, a driver that
 * answered oddly once) is retried by the next call. */
static bool init_failure_is_permanent(CUresult r)
{
    switch ((int)r) {
    case CUDA_ERROR_NOT_INITIALIZED: /* dlopen failed (or a forked child's driver) */
    case CUDA_ERROR_NOT_SUPPORTED:   /* not a driver, too old, an entry point missing */
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case 803: /* CUDA_ERROR_SYSTEM_DRIVER_MISMATCH */
    case 804: /* CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE */
        return true;
    default:
        return false;
    }
}

/* Initialisation; held across the driver's loading; only layer_lock is taken under it
 * (docs/design.md, "Locks"). */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool init_permanent; /* FAILED for good */

/* ---- fork ----
 * A child forked while another thread of the parent held one of cupool's locks inherits it
 * held, by a thread that does not exist there. So in a forked child cupool takes no lock at
 * all: every public call checks the state first and refuses with CUDA_ERROR_NOT_PERMITTED
 * (its message is written to the thread's own TLS, see cupool__fail), and nothing is freed
 * at the child's exit. The one lock a child may take is the initialisation lock, when the
 * parent never initialised cupool (the child may then use it afresh); so a child forked while
 * any thread was entering, or inside, an initialisation is FORKED too. init_entering counts
 * those threads; it is raised before the lock is taken, so no fork can fall between the two.
 * (The child handler takes no lock: a prepare handler taking init_lock would order it after
 * the driver's own fork handlers, the reverse of initialisation's order, a deadlock.) */
static _Atomic unsigned init_entering;

static void init_lock_take(void)
{
    atomic_fetch_add(&init_entering, 1);
    pthread_mutex_lock(&init_lock);
}

static void init_lock_drop(void)
{
    pthread_mutex_unlock(&init_lock);
    atomic_fetch_sub(&init_entering, 1);
}

static void at_fork_child(void)
{
    /* The child shares no usable CUDA state with its parent (the driver refuses every call
     * there too); cupool's pools hold the parent's handles, so they are abandoned unused. A
     * parent that never tried to initialise leaves the child free to start afresh. */
    if (cupool__state_now() != CUPOOL_ST_UNINIT || atomic_load(&init_entering) != 0) {
        atomic_store(&cupool__hot.state, CUPOOL_ST_FORKED);
        cupool__layers_forked(); /* the maintenance thread does not exist here */
    }
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_handlers_register(void)
{
    pthread_atfork(NULL, NULL, at_fork_child);
}

static void at_exit_cxa(void *arg)
{
    (void)arg;
    at_exit();
}

static void register_exit_handlers(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    __cxa_atexit(at_exit_cxa, NULL, &__dso_handle);
    at_quick_exit(at_exit);
}

/* One initialisation attempt, under init_lock: the first one reads the configuration; a
 * failed one that may succeed later leaves FAILED with init_permanent unset. */
static void init_attempt(void)
{
    static bool configured;
    cupool__exit_marker_register();
    int st = cupool__state_now();
    if (st != CUPOOL_ST_UNINIT && (st != CUPOOL_ST_FAILED || init_permanent))
        return;
    if (!configured) {
        configured = true;
        cupool__config_load();
        cupool__layers_init();
        cupool__membarrier_register();
    }
    const char *path = cupool__cfg.driver_path;
    /* the preload, with no CUPOOL_DRIVER_PATH given: the driver the program itself opened */
    const char *hint = cupool__driver_hooks.driver_hint ? cupool__driver_hooks.driver_hint() : NULL;
    if (hint && strcmp(path, "libcuda.so.1") == 0)
        path = hint;
    init_result = cupool__driver_load(path, init_message, sizeof(init_message));
    if (init_result != CUDA_SUCCESS) {
        init_permanent = init_failure_is_permanent(init_result);
        cupool__log(CUPOOL_LOG_INFO, "%s%s", init_message,
                    init_permanent ? "" : " (tried again at the next call)");
        /* A permanent failure will never call the driver: the exit handler only prints the
         * statistics. A transient one registers it at the attempt that succeeds. */
        if (init_permanent)
            register_exit_handlers();
        atomic_compare_exchange_strong(&cupool__hot.state, &st, CUPOOL_ST_FAILED);
        return;
    }
    /* After cuInit: exit handlers run last-registered first, so cupool's runs before any the
     * driver registered while initialising. */
    register_exit_handlers();
    cupool__log(CUPOOL_LOG_INFO, "driver %s (CUDA %d.%d), metadata from %s%s", cupool__drv.path,
                cupool__drv.version / 1000, cupool__drv.version % 1000 / 10, cupool__alloc_name(),
                cupool__cfg.disable ? ", pooling disabled (CUPOOL_DISABLE)" : "");
    /* Never over a state exit or fork set meanwhile: the library does not come back. */
    atomic_compare_exchange_strong(&cupool__hot.state, &st,
                                   cupool__cfg.disable ? CUPOOL_ST_PASSTHROUGH : CUPOOL_ST_RUNNING);
}

CUresult cupool__enter(void)
{
    int st = cupool__state_now();
    if (CUPOOL_UNLIKELY(st == CUPOOL_ST_UNINIT || (st == CUPOOL_ST_FAILED && !init_permanent))) {
        pthread_once(&fork_once, fork_handlers_register);
        init_lock_take();
        init_attempt();
        init_lock_drop();
        st = cupool__state_now();
    }
    switch (st) {
    case CUPOOL_ST_RUNNING:
    case CUPOOL_ST_PASSTHROUGH:
        return CUDA_SUCCESS;
    case CUPOOL_ST_FAILED: {
        init_lock_take();
        CUresult r = init_result;
        char msg[CUPOOL_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "%s", init_message);
        init_lock_drop();
        return cupool__fail(r, "%s", msg);
    }
    case CUPOOL_ST_EXITING:
        return cupool__fail(CUDA_ERROR_DEINITIALIZED,
                            "the process is exiting: cupool no longer calls the driver");
    case CUPOOL_ST_DEAD:
        return cupool__fail(CUDA_ERROR_DEINITIALIZED,
                            "the driver reported CUDA_ERROR_DEINITIALIZED earlier: cupool no longer "
                            "calls it");
    case CUPOOL_ST_FORKED:
        return cupool__fail(CUDA_ERROR_NOT_PERMITTED,
                            "this process is a child forked after cupool was initialised: CUDA "
                            "state cannot be used across fork(); exec or initialise before forking");
    case CUPOOL_ST_UNLOADED:
        return cupool__fail(CUDA_ERROR_DEINITIALIZED, "the library is being unloaded");
    default:
        return cupool__fail(CUDA_ERROR_UNKNOWN, "cupool in unknown state %d", st);
    }
}

CUresult cupool_init(void)
{
    return cupool__enter();
}

CUresult cupool_driver_get_proc(const char *symbol, int cuda_version, void **pfn)
{
    if (!symbol || !pfn)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_driver_get_proc: %s is NULL",
                            symbol ? "pfn" : "symbol");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    return cupool__driver_get_proc(symbol, cuda_version, pfn);
}

/* The native worker pool of the software backend (see rk_pool.h): a fixed set of pthreads that
 * run the ranges of one job at a time, the caller taking part as thread slot 0. */
/* Python.h first (it sets the feature macros): a worker keeps a Python thread state for its life. */
#include <Python.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "rk_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#define RK_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__) || defined(__arm__)
#define RK_PAUSE() __asm__ __volatile__("yield")
#else
#define RK_PAUSE() ((void)0)
#endif


struct rk_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    int threads;            /* caller included */
    int started;            /* workers running */
    pthread_t *tids;
    pid_t pid;              /* process that started the workers (none survive a fork) */
    int stop;
    int64_t spin_ns;        /* how long an idle worker polls before it sleeps */
    unsigned long gen;      /* bumped by every run that uses the workers */
    int sleepers;
    int busy;               /* a run is in progress */
    int abandoned;          /* left at interpreter exit: workers end without the Python API */
    /* the run in progress */
    rk_range_fn fn;
    void *ctx;
    int64_t n, chunks;
    int parts, fixed;
    int64_t next;           /* next chunk to hand out (atomic) */
    int failed;             /* a range returned nonzero (atomic) */
    int active;             /* workers inside the run (changed under mu, atomically: the caller polls it) */
    int closed;             /* the caller has finished: no worker may enter */
    int64_t *counts;        /* work items each thread slot ran */
};

typedef struct { rk_pool *pool; int slot; unsigned long seen; } rk_worker_arg;

/* This process's id, kept instead of a getpid() per run (a system call, about a microsecond
   on a VM, twice per split layer): read once, and again in a forked child (pthread_atfork). */
static pid_t rk_pid_cached;
static pthread_once_t rk_pid_once = PTHREAD_ONCE_INIT;
static void rk_pid_refresh(void) { rk_pid_cached = getpid(); }
static void rk_pid_init(void) {
    rk_pid_refresh();
    pthread_atfork(NULL, NULL, rk_pid_refresh);
}
static pid_t rk_pid(void) {
    pthread_once(&rk_pid_once, rk_pid_init);
    return rk_pid_cached;
}

static int64_t rk_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

rk_pool *rk_pool_new(int threads, int64_t spin_ns) {
    rk_pool *p = (rk_pool *)calloc(1, sizeof(rk_pool));
    if (!p) return NULL;
    p->threads = threads < 1 ? 1 : threads;
    p->tids = (pthread_t *)calloc((size_t)p->threads, sizeof(pthread_t));
    p->counts = (int64_t *)calloc((size_t)p->threads, sizeof(int64_t));
    if (!p->tids || !p->counts) { free(p->tids); free(p->counts); free(p); return NULL; }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->spin_ns = spin_ns;
    return p;
}

/* The ranges of the run in progress: chunk k is [n*k/chunks, n*(k+1)/chunks). */
static void rk_pool_take(rk_pool *p, int slot) {
    for (;;) {
        if (__atomic_load_n(&p->failed, __ATOMIC_RELAXED)) return;
        int64_t k = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (k >= p->chunks) return;
        int64_t a = p->n * k / p->chunks, b = p->n * (k + 1) / p->chunks;
        if (p->fn(p->ctx, a, b, slot)) __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
        p->counts[slot] += b - a;
    }
}

static void rk_pool_fixed(rk_pool *p, int slot) {
    int64_t a = p->n * slot / p->chunks, b = p->n * (slot + 1) / p->chunks;
    if (p->fn(p->ctx, a, b, slot)) __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    p->counts[slot] += b - a;
}

/* Polls cond (read without the lock) while it holds and the pool is not stopping, for at most
   the pool's spin time, yielding the core now and then. */
#define RK_POLL(p, cond) do {                                                   \
        int64_t until_ = rk_now_ns() + (p)->spin_ns;                            \
        int polls_ = 0;                                                         \
        while ((cond) && !__atomic_load_n(&(p)->stop, __ATOMIC_RELAXED)) {      \
            RK_PAUSE();                                                         \
            if (++polls_ == 64) {                                               \
                polls_ = 0;                                                     \
                if (rk_now_ns() >= until_) break;                               \
                sched_yield();  /* a thread waiting for this core gets it */    \
            }                                                                   \
        }                                                                       \
    } while (0)

static void rk_pool_serve(rk_pool *p, int slot, unsigned long seen) {
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->gen == seen && !p->stop) {
            /* poll for a while without the lock: the next run usually comes soon */
            pthread_mutex_unlock(&p->mu);
            RK_POLL(p, __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen);
            pthread_mutex_lock(&p->mu);
            while (p->gen == seen && !p->stop) {
                p->sleepers++;
                pthread_cond_wait(&p->wake, &p->mu);
                p->sleepers--;
            }
        }
        if (p->stop) break;
        seen = p->gen;
        if (slot >= p->parts) continue;          /* this run does not need this worker */
        if (p->fixed) {
            /* counted as inside by the caller: it waits for this range */
            pthread_mutex_unlock(&p->mu);
            rk_pool_fixed(p, slot);
        } else {
            if (p->closed) continue;              /* the caller already took every range */
            __atomic_add_fetch(&p->active, 1, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&p->mu);
            rk_pool_take(p, slot);
        }
        pthread_mutex_lock(&p->mu);
        if (__atomic_sub_fetch(&p->active, 1, __ATOMIC_RELEASE) == 0 && p->closed) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
}

static int rk_pool_left(rk_pool *p) {
    pthread_mutex_lock(&p->mu);
    int left = p->abandoned;
    pthread_mutex_unlock(&p->mu);
    return left;
}

static void *rk_pool_worker(void *arg) {
    rk_worker_arg w = *(rk_worker_arg *)arg;
    free(arg);
#if defined(__linux__)
    char name[16];
    snprintf(name, sizeof name, "rknnlite-w%d", w.slot);
    pthread_setname_np(pthread_self(), name);
#endif
    /* a thread state for the worker's life: Python ranges run on it, and the
       thread-local data they keep (scratch buffers) lasts from run to run */
    if (rk_pool_left(w.pool)) return NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyThreadState *ts = PyEval_SaveThread();
    rk_pool_serve(w.pool, w.slot, w.seen);
    if (rk_pool_left(w.pool)) return NULL;  /* the interpreter is going: its state too */
    PyEval_RestoreThread(ts);
    PyGILState_Release(gil);
    return NULL;
}

/* Joins the workers once no run is in progress; call without the GIL (they take it to end). */
void rk_pool_stop(rk_pool *p) {
    int started;
    pthread_mutex_lock(&p->mu);
    while (p->busy && p->pid == rk_pid()) {
        pthread_mutex_unlock(&p->mu);
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&p->mu);
    }
    started = p->pid == rk_pid() ? p->started : 0;
    p->busy = 1;                /* runs started while the workers leave go serial */
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++) pthread_join(p->tids[i], NULL);
    pthread_mutex_lock(&p->mu);
    p->started = 0;
    p->stop = 0;
    p->busy = 0;
    pthread_mutex_unlock(&p->mu);
}

void rk_pool_abandon(rk_pool *p) {
    pthread_mutex_lock(&p->mu);
    int started = p->pid == rk_pid() ? p->started : 0;
    p->busy = 1;                /* for good: whatever runs now runs serially on its caller */
    p->stop = 1;
    p->abandoned = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++) pthread_detach(p->tids[i]);
}

int rk_py_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

void rk_pool_free(rk_pool *p) {
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->tids);
    free(p->counts);
    free(p);
}

int rk_pool_ensure(rk_pool *p) {
    /* at interpreter exit no worker starts (it would need the GIL): runs go serial */
    if (p->threads < 2 || rk_py_finalizing()) return 0;
    pid_t pid = rk_pid();
    if (p->started && p->pid != pid) {
        /* a forked child: the parent's workers do not exist here, and the lock may
           have been held by one of them at the fork */
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->wake, NULL);
        pthread_cond_init(&p->done, NULL);
        p->started = 0;
        p->busy = 0;
        p->sleepers = 0;
    }
    if (p->started == p->threads - 1) return 0;
    pthread_mutex_lock(&p->mu);
    p->pid = pid;
    while (p->started < p->threads - 1) {
        rk_worker_arg *w = (rk_worker_arg *)malloc(sizeof(rk_worker_arg));
        if (!w) break;
        w->pool = p;
        w->slot = p->started + 1;
        w->seen = p->gen;
        if (pthread_create(&p->tids[p->started], NULL, rk_pool_worker, w) != 0) { free(w); break; }
        p->started++;
    }
    int ok = p->started == p->threads - 1;
    pthread_mutex_unlock(&p->mu);
    return ok ? 0 : -1;
}

int rk_pool_run(rk_pool *p, rk_range_fn fn, void *ctx, int64_t n, int64_t min_chunk) {
    int64_t pieces = n / (min_chunk > 1 ? min_chunk : 1);
    int64_t parts = pieces < p->threads ? pieces : p->threads;
    int serial = parts <= 1;
    if (!serial) {
        pthread_mutex_lock(&p->mu);
        serial = p->busy || p->pid != rk_pid() || p->started < parts - 1;
        if (!serial) p->busy = 1;
        else pthread_mutex_unlock(&p->mu);
    }
    if (serial) {
        int r = n > 0 ? fn(ctx, 0, n, 0) : 0;
        p->counts[0] += n;
        return r;
    }
    int64_t chunks = pieces < parts * RK_CHUNKS_PER_THREAD ? pieces : parts * RK_CHUNKS_PER_THREAD;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunks = chunks;
    p->parts = (int)parts;
    p->fixed = chunks == parts;
    p->failed = 0;
    p->closed = 0;
    __atomic_store_n(&p->active, p->fixed ? (int)parts - 1 : 0, __ATOMIC_RELAXED);
    p->next = 0;
    __atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
    if (p->sleepers) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    if (p->fixed) rk_pool_fixed(p, 0);
    else rk_pool_take(p, 0);
    pthread_mutex_lock(&p->mu);
    p->closed = 1;
    if (__atomic_load_n(&p->active, __ATOMIC_RELAXED) > 0) {
        /* poll for the workers' last ranges before sleeping: they usually end within
           microseconds of the caller's, and a sleep costs a futex wake-up and a reschedule */
        pthread_mutex_unlock(&p->mu);
        RK_POLL(p, __atomic_load_n(&p->active, __ATOMIC_ACQUIRE) > 0);
        pthread_mutex_lock(&p->mu);
    }
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    p->busy = 0;
    int failed = p->failed;
    pthread_mutex_unlock(&p->mu);
    return failed;
}

static int rk_pool_threads(const rk_pool *p) { return p->threads; }

int64_t *rk_pool_counts_of(rk_pool *p) { return p->counts; }

rk_pool_api rk_pool_api_table = { rk_pool_ensure, rk_pool_run, rk_pool_threads };

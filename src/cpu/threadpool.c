/* Thread pool.
 *
 * One 64-bit claim word holds (job generation << 32 | next task index).
 * Publishing a job stores a new generation with index 0; threads claim a
 * task with a compare-and-swap that fails once the generation moved on, so
 * a worker that wakes late either takes a real task of the current job or
 * nothing. The caller waits for the count of finished tasks, never for a
 * worker to check in: on an oversubscribed machine a descheduled worker
 * costs nothing unless it holds a task. Job descriptors alternate between
 * two slots, so publishing job g + 1 never writes the slot a late reader of
 * job g looks at (and its claim would fail anyway). */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "../util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a thread spins before sleeping (workers) or yielding (the
 * caller), by the clock: the gaps inside a forward pass are microseconds,
 * while a count of pauses spins for a time that differs threefold between
 * CPUs (a pause is 23 ns on one Zen 4 VM, 75 ns on another) and burns a
 * core between tokens. The clock is read every SPIN_CHECK pauses. */
#define SPIN_NS 100000
#define SPIN_CHECK 32

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Spins one step; 0 once SPIN_NS have passed since *t0 (0: not started). */
static int spin(int *count, uint64_t *t0) {
    CPU_RELAX();
    if (++*count % SPIN_CHECK) return 1;
    const uint64_t t = now_ns();
    if (!*t0) *t0 = t;
    return t - *t0 < SPIN_NS;
}

typedef struct {
    dp_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
} job;

typedef struct {
    dp_pool *pool;
    int index;
} worker_arg;

struct dp_pool {
    int n;                       /* threads including the caller */
    pthread_t *threads;
    worker_arg *args;
    int created;
    uint32_t gen;                /* the caller's job counter */
    job jobs[2];                 /* slot gen & 1 */
    _Atomic uint64_t claim;      /* gen << 32 | next task */
    _Atomic int64_t done;        /* finished tasks of the current job */
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int sleepers;
};

static inline uint32_t claim_gen(uint64_t c) { return (uint32_t)(c >> 32); }

/* Claims and runs tasks of job g until none is left or the job moved on. */
static void work(dp_pool *p, uint32_t g, int thread) {
    uint64_t c = atomic_load(&p->claim);
    if (claim_gen(c) != g) return;
    const job *jb = &p->jobs[g & 1];
    dp_pool_fn fn = jb->fn;
    void *ctx = jb->ctx;
    int64_t n = jb->n_tasks;
    for (;;) {
        if (claim_gen(c) != g || (int64_t)(uint32_t)c >= n) return;
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue;
        fn(ctx, (int64_t)(uint32_t)c, thread);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        c = atomic_load(&p->claim);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    dp_pool *p = wa->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        uint64_t t0 = 0;
        while ((g = claim_gen(atomic_load(&p->claim))) == seen && !atomic_load(&p->stop)) {
            if (spin(&spins, &t0)) continue;
            /* seq_cst with the caller's publish: either we see the new job
             * here, or the caller sees us in sleepers and wakes us */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (claim_gen(atomic_load(&p->claim)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
            t0 = 0;
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        work(p, g, wa->index);
    }
    return NULL;
}

dp_pool *dp_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    dp_pool *p = dp_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = dp_calloc((size_t)n_threads, sizeof(pthread_t));
        p->args = dp_calloc((size_t)n_threads, sizeof(worker_arg));
        if (!p->threads || !p->args) {
            dp_pool_free(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            p->args[i] = (worker_arg){p, i};
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
                dp_set_error(DP_ERR_NOMEM, "could not start CPU worker thread %d of %d", i, n_threads - 1);
                dp_pool_free(p);
                return NULL;
            }
            p->created++;
        }
    }
    return p;
}

void dp_pool_free(dp_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->created; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p->args);
    free(p);
}

int dp_pool_threads(const dp_pool *p) { return p->n; }
int dp_pool_threads_created(const dp_pool *p) { return p->created; }

void dp_pool_run(dp_pool *p, dp_pool_fn fn, void *ctx, int64_t n_tasks) {
    if (n_tasks <= 0) return;
    if (p->n == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    uint32_t g = ++p->gen;
    if (g == 0) g = ++p->gen; /* 0 is the workers' initial "seen" */
    p->jobs[g & 1] = (job){fn, ctx, n_tasks};
    atomic_store(&p->done, 0);
    atomic_store(&p->claim, (uint64_t)g << 32);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    work(p, g, 0);
    int spins = 0;
    uint64_t t0 = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks)
        if (!spin(&spins, &t0)) sched_yield();
}

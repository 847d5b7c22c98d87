/* The CPU thread pool: every task runs exactly once per job with 1, 2, 3 and
 * 7 threads, thread indices stay in range, jobs of every size (0, 1, few,
 * many) follow each other back to back and after idle gaps long enough for
 * the workers to fall asleep, and no thread is created after the pool. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/threadpool.h"
#include "testlib.h"

typedef struct {
    _Atomic int *count;
    _Atomic int bad_thread;
    int n_threads;
    _Atomic int used[16];
} job_ctx;

static void task(void *arg, int64_t t, int thread) {
    job_ctx *c = arg;
    atomic_fetch_add(&c->count[t], 1);
    if (thread < 0 || thread >= c->n_threads) atomic_store(&c->bad_thread, 1);
    else atomic_store(&c->used[thread], 1);
    /* a little uneven work */
    volatile double x = 0;
    for (int i = 0; i < (int)(t % 7) * 50; i++) x += i;
    (void)x;
}

static void run_pool(int n_threads) {
    dp_pool *p = dp_pool_new(n_threads);
    CHECK(p != NULL);
    if (!p) return;
    CHECK(dp_pool_threads(p) == n_threads);
    int created = dp_pool_threads_created(p);
    CHECKF(created == n_threads - 1, "%d threads: created %d workers", n_threads, created);
    enum { MAXT = 5000 };
    job_ctx c = {.n_threads = n_threads};
    c.count = malloc(sizeof(_Atomic int) * MAXT);
    const int sizes[] = {0, 1, 2, 3, 7, 64, 1000, MAXT};
    int wrong = 0, jobs = 0;
    for (int rep = 0; rep < 400; rep++) {
        int n = sizes[t_rand_u64() % (sizeof sizes / sizeof sizes[0])];
        for (int i = 0; i < MAXT; i++) atomic_store(&c.count[i], 0);
        dp_pool_run(p, task, &c, n);
        jobs++;
        for (int i = 0; i < MAXT; i++) wrong += atomic_load(&c.count[i]) != (i < n ? 1 : 0);
        if (rep % 100 == 99) {
            /* idle long enough for the workers to go to sleep */
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    CHECKF(wrong == 0, "%d threads: %d task counts wrong over %d jobs", n_threads, wrong, jobs);
    CHECKF(!atomic_load(&c.bad_thread), "%d threads: a thread index out of range", n_threads);
    CHECKF(dp_pool_threads_created(p) == created, "%d threads: threads created per job", n_threads);
    int used = 0;
    for (int i = 0; i < n_threads && i < 16; i++) used += atomic_load(&c.used[i]);
    printf("%d threads: %d took tasks\n", n_threads, used);
    CHECK(atomic_load(&c.used[0]) == 1); /* the caller always works */
    free(c.count);
    dp_pool_free(p);
}

int main(void) {
    t_seed();
    run_pool(1);
    run_pool(2);
    run_pool(3);
    run_pool(7);
    /* many pools created and freed (sessions come and go) */
    for (int i = 0; i < 50; i++) {
        dp_pool *p = dp_pool_new(1 + i % 4);
        CHECK(p != NULL);
        dp_pool_free(p);
    }
    return t_done("test_cpu_threadpool");
}

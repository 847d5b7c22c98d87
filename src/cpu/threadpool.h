/* A fixed pool of worker threads created once per session. dp_pool_run
 * hands out task indices 0..n_tasks-1 (each exactly once, claimed
 * dynamically) to the caller and the workers and returns when all are done.
 * Workers spin briefly between jobs (the gaps inside a forward pass are
 * microseconds), then sleep on a condition variable. */
#ifndef DP_THREADPOOL_H
#define DP_THREADPOOL_H

#include <stdint.h>

typedef struct dp_pool dp_pool;

/* task: 0..n_tasks-1; thread: 0 (the caller) .. n_threads-1 */
typedef void (*dp_pool_fn)(void *ctx, int64_t task, int thread);

/* n_threads counts the caller: 1 starts no thread. NULL on failure. */
dp_pool *dp_pool_new(int n_threads);
void dp_pool_free(dp_pool *p);
int dp_pool_threads(const dp_pool *p);
/* Runs fn over the tasks. Not reentrant: call from one thread at a time, never from inside a task. */
void dp_pool_run(dp_pool *p, dp_pool_fn fn, void *ctx, int64_t n_tasks);
/* Threads this pool ever created (tests: constant after dp_pool_new). */
int dp_pool_threads_created(const dp_pool *p);

#endif

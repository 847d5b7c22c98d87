/* The scheduler's helper threads for its work on the host:
 *  - during a step (GPU backends): the token masks of the step's constrained
 *    requests (response_format, tool_choice). A mask depends only on the text
 *    so far, known before the step's logits are (dp_constraint_prepare), so
 *    the masks cost the step nothing while they take less time than the
 *    evaluation; the engine takes each one for its draw on the device when
 *    it is ready (or works it out itself). The CPU backend's evaluation uses
 *    every core: there the masks are made in the sampling;
 *  - after a step: the rows sampled on the host (penalties, logit_bias, with
 *    or without a constraint), one request per thread at a time. */
#ifndef SERVE_POOL_H
#define SERVE_POOL_H

typedef struct host_pool host_pool;
typedef void (*pool_fn)(void *arg, int i);

/* n_threads helpers (>= 1); NULL when none can be started. */
host_pool *pool_new(int n_threads);
/* Starts fn(arg, i) for i in [0, n) on the helpers; returns at once. */
void pool_start(host_pool *p, pool_fn fn, void *arg, int n);
/* Until every call of the last start has returned. */
void pool_wait(host_pool *p);
/* pool_start, the caller taking calls too, then pool_wait. */
void pool_run(host_pool *p, pool_fn fn, void *arg, int n);
void pool_free(host_pool *p);

#endif

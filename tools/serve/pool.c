/* The scheduler's helper threads (pool.h). */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>

struct host_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *th;
    int n_th;
    pool_fn fn;
    void *arg;
    int n, next, finished; /* the job: calls handed out and returned */
    int exiting;
};

/* Takes and makes calls of the job until none is left; with p->mu held. */
static void take_calls(host_pool *p) {
    while (p->next < p->n) {
        const int i = p->next++;
        pthread_mutex_unlock(&p->mu);
        p->fn(p->arg, i);
        pthread_mutex_lock(&p->mu);
        if (++p->finished == p->n) pthread_cond_broadcast(&p->done);
    }
}

static void *helper(void *arg) {
    host_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->exiting) {
        take_calls(p);
        if (!p->exiting) pthread_cond_wait(&p->work, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

host_pool *pool_new(int n_threads) {
    host_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->th = calloc((size_t)n_threads, sizeof *p->th))) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (; p->n_th < n_threads; p->n_th++)
        if (pthread_create(&p->th[p->n_th], NULL, helper, p)) break;
    if (!p->n_th) {
        pool_free(p);
        return NULL;
    }
    return p;
}

void pool_start(host_pool *p, pool_fn fn, void *arg, int n) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->arg = arg;
    p->n = n, p->next = p->finished = 0;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void pool_wait(host_pool *p) {
    pthread_mutex_lock(&p->mu);
    while (p->finished < p->n) pthread_cond_wait(&p->done, &p->mu);
    p->n = p->next = p->finished = 0;
    pthread_mutex_unlock(&p->mu);
}

void pool_run(host_pool *p, pool_fn fn, void *arg, int n) {
    pool_start(p, fn, arg, n);
    pthread_mutex_lock(&p->mu);
    take_calls(p);
    pthread_mutex_unlock(&p->mu);
    pool_wait(p);
}

void pool_free(host_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->exiting = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_th; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

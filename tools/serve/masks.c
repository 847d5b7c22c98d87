/* Helper threads that prepare constraints' masks (masks.h). */
#include "masks.h"

#include <pthread.h>
#include <stdlib.h>

struct mask_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *th;
    int n_th;
    dp_constraint *const *c;
    int n, next, finished; /* the job: constraints handed out and prepared */
    long gen;              /* bumped by every start */
    int exiting;
};

static void *helper(void *arg) {
    mask_pool *p = arg;
    long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->exiting && (p->gen == seen || p->next >= p->n)) {
            seen = p->gen;
            pthread_cond_wait(&p->work, &p->mu);
        }
        if (p->exiting) break;
        const int i = p->next++;
        pthread_mutex_unlock(&p->mu);
        dp_constraint_prepare(p->c[i]);
        pthread_mutex_lock(&p->mu);
        if (++p->finished == p->n) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

mask_pool *mask_pool_new(int n_threads) {
    mask_pool *p = calloc(1, sizeof *p);
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
        mask_pool_free(p);
        return NULL;
    }
    return p;
}

void mask_pool_start(mask_pool *p, dp_constraint *const *c, int n) {
    pthread_mutex_lock(&p->mu);
    p->c = c;
    p->n = n;
    p->next = p->finished = 0;
    p->gen++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void mask_pool_wait(mask_pool *p) {
    pthread_mutex_lock(&p->mu);
    while (p->finished < p->n) pthread_cond_wait(&p->done, &p->mu);
    p->n = 0;
    pthread_mutex_unlock(&p->mu);
}

void mask_pool_free(mask_pool *p) {
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

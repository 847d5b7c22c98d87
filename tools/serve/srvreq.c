/* A request's life apart from the scheduler: made, given the later
 * choices and prompts of its groups, destroyed (scheduler.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "scheduler.h"

srv_req *srv_req_new(void) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->efd < 0) {
        free(r);
        return NULL;
    }
    r->refs = 1;
    r->seq = -1;
    r->client_fd = -1;
    return r;
}

/* A new member of from's request: from's parameters (borrowed), id,
 * connection and eventfd (the request's first's, not a copy: a wake-up of
 * any member wakes the first's wait, and a request of /v1/embeddings'
 * 2048 inputs takes one descriptor, not 2048; the first closes it, last,
 * since every member holds it). */
static srv_req *member(const srv_req *from) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->efd = from->efd;
    r->refs = 1;
    r->seq = -1;
    r->p = from->p;
    memcpy(r->id, from->id, sizeof r->id);
    r->created = from->created;
    r->think = from->think;
    r->cons_think = from->cons_think;
    r->tools = from->tools;
    r->client_fd = from->client_fd;
    r->t_submit = from->t_submit;
    return r;
}

srv_req *srv_req_choice(srv_req *lead) {
    if (lead->n_follow == REQ_MAX_N - 1) return NULL;
    srv_req *r = member(lead);
    if (!r) return NULL;
    r->lead = lead;
    lead->refs++;
    r->choice = lead->n_follow + 1;
    r->index = lead->index + r->choice;
    lead->follow[lead->n_follow++] = r;
    r->prompt = lead->prompt;
    r->n_prompt = lead->n_prompt;
    r->max_tokens = lead->max_tokens;
    return r;
}

srv_req *srv_req_prompt(srv_req *first) {
    srv_req *r = member(first);
    if (!r) return NULL;
    r->first = first;
    first->refs++;
    srv_req **at = &first->next_prompt;
    int k = 1;
    for (; *at; at = &(*at)->next_prompt) k++;
    *at = r;
    r->index = k * first->p.n;
    return r;
}

/* Under the lock, or on a request no other thread knows. */
void srv_req_destroy(srv_req *r) {
    if (!r) return;
    srv_req *up = r->lead ? r->lead : r->first; /* the one it holds */
    if (!up) req_params_free(&r->p);
    if (!r->lead) free(r->prompt); /* a later choice's prompt is its lead's */
    dp_sampler_free(r->smp);
    dp_constraint_free(r->cons);
    dp_detok_free(r->dt);
    free(r->emb);
    sb_free(&r->held);
    free(r->lp_wait);
    free(r->pen_tok);
    free(r->pen_cnt);
    free(r->work);
    req_output_free(&r->out);
    if (!r->lead && !r->first) close(r->efd); /* the request's first: its members share it */
    free(r);
    if (up && --up->refs == 0) srv_req_destroy(up);
}

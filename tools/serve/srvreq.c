/* A request's life apart from the scheduler: made, given the later
 * choices of its group, destroyed (scheduler.h). */
#include <fcntl.h>
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

srv_req *srv_req_choice(srv_req *lead) {
    if (lead->n_follow == REQ_MAX_N - 1) return NULL;
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    /* the same counter: a wake-up of any choice wakes the lead's wait */
    r->efd = fcntl(lead->efd, F_DUPFD_CLOEXEC, 0);
    if (r->efd < 0) {
        free(r);
        return NULL;
    }
    r->refs = 1;
    r->seq = -1;
    r->p = lead->p;
    r->lead = lead;
    lead->refs++;
    r->choice = lead->n_follow + 1;
    lead->follow[lead->n_follow++] = r;
    memcpy(r->id, lead->id, sizeof r->id);
    r->created = lead->created;
    r->prompt = lead->prompt;
    r->n_prompt = lead->n_prompt;
    r->max_tokens = lead->max_tokens;
    r->think = lead->think;
    r->cons_think = lead->cons_think;
    r->tools = lead->tools;
    r->client_fd = lead->client_fd;
    r->t_submit = lead->t_submit;
    return r;
}

/* Under the lock, or on a request no other thread knows. */
void srv_req_destroy(srv_req *r) {
    if (!r) return;
    srv_req *lead = r->lead;
    if (!lead) { /* a later choice's parameters and prompt are the lead's */
        req_params_free(&r->p);
        free(r->prompt);
    }
    dp_sampler_free(r->smp);
    dp_constraint_free(r->cons);
    dp_detok_free(r->dt);
    sb_free(&r->held);
    free(r->lp_wait);
    free(r->pen_tok);
    free(r->pen_cnt);
    free(r->work);
    req_output_free(&r->out);
    close(r->efd);
    free(r);
    if (lead && --lead->refs == 0) srv_req_destroy(lead);
}

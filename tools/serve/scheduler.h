/* Continuous batching: one thread owns the session and runs dp_eval_batch
 * steps over every running request; requests join at the next step and
 * leave when they finish (see scheduler.c). */
#ifndef SERVE_SCHEDULER_H
#define SERVE_SCHEDULER_H

#include <stdint.h>

#include "doppler.h"
#include "jsonw.h"
#include "request.h"

/* One generated token's log probabilities (of the model's distribution,
 * before penalties and temperature). */
typedef struct {
    int32_t id;
    int text_offset;         /* where its text starts in the completion */
    float logprob;
    int n_top;
    int32_t top_id[REQ_MAX_TOP_LOGPROBS];
    float top_lp[REQ_MAX_TOP_LOGPROBS];
} tok_lp;

/* Output not yet sent: released text in pieces (one per step that released
 * text, so a stream sends a chunk per token) and their log probabilities. */
typedef struct {
    int len, n_lp;           /* bytes of text, tok_lp entries */
} out_piece;

typedef struct {
    sbuf text;
    out_piece *pieces;
    int n_pieces, cap_pieces;
    tok_lp *lp;
    int n_lp, cap_lp;
} req_output;

void req_output_free(req_output *o); /* respond.c */

/* A request of n choices is n srv_reqs: the first (the lead) owns the
 * parameters and the prompt, which the others (srv_req_choice) share; the
 * group is admitted whole into n sequences, and the others wait (parked)
 * until the lead has computed the prompt, then take its pages from the
 * prefix cache. A completion of several prompts is a group per prompt:
 * the request's first lead owns the parameters, the later prompts' leads
 * (srv_req_prompt) borrow them and own their prompts. The request has one
 * place in the queue, which its groups take in turn, each admitted when
 * its n sequences are free, so a request may hold more choices than the
 * server runs at once. All share the first lead's eventfd, so one wait
 * watches them all. */
typedef struct srv_req srv_req;
struct srv_req {
    /* set before sched_submit, read-only afterwards */
    req_params p;            /* a later choice's or prompt's is the first's, borrowed */
    int choice;              /* its index among its prompt's choices (the seed's offset) */
    int index;               /* its index in the response: prompt * n + choice */
    srv_req *lead;           /* a later choice: its prompt's first (it holds a reference on it); NULL for a lead */
    srv_req *follow[REQ_MAX_N - 1]; /* a lead: the later choices (not references) */
    int n_follow;
    srv_req *first;          /* a later prompt's lead: the request's first (a reference), which owns p */
    srv_req *next_prompt;    /* a lead: the next prompt's (not a reference; the connection holds them all, and
                                a queued group's later ones are queued too) */
    char id[48];
    int64_t created;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    dp_sampler *smp;         /* with the prompt accepted (repeat penalty) */
    dp_detok *dt;
    int host_sample;         /* sample on the host: presence/frequency penalties, logit_bias (a constraint
                                alone is the engine's: dp_batch_entry.constraint) */
    dp_constraint *cons;     /* response_format json: the tokens the answer may take (updated by the scheduler) */
    int think;               /* chat: reasoning apart (THINK_SPLIT), the prompt ending in a <think> block (THINK_INSIDE) */
    int cons_think;          /* chat: a constrained answer's think mode (DP_THINK_*, reasoning.h) */
    int tools;               /* chat: the answer's tool calls become tool_calls, in this format (toolcall.h) */
    int client_fd;           /* the connection's socket, watched for a hang-up */
    double t_submit;
    double *emb;             /* an input of /v1/embeddings (embed.c): what its pooling reads of the hidden states,
                                n_embd values the scheduler adds (embed_add); it samples nothing and ends once its
                                prompt is computed */
    int pooling;             /* with emb: DP_POOLING_MEAN, CLS or LAST */

    /* the scheduler thread's */
    int state;               /* (under the lock) new, waiting, running, done */
    int parked;              /* a later choice holding its sequence until the lead has computed the prompt */
    int lead_parked;         /* the lead: its later choices are parked */
    int seq, pos;            /* sequence id, positions cached */
    int n_cached;            /* prompt positions taken from the prefix cache */
    int32_t next;            /* sampled token to evaluate next */
    int n_gen;
    int text_bytes;          /* produced so far (held back included) */
    sbuf held;               /* produced text not yet released: it may start a stop string */
    tok_lp *lp_wait;         /* entries of tokens whose text is still held back */
    int n_lp_wait, cap_lp_wait;
    tok_lp lp_cur;
    int lp_ok;
    int32_t *pen_tok;        /* presence/frequency penalties: generated token -> count */
    int *pen_cnt;
    int pen_cap, pen_n;
    float *work;             /* host sampling: the penalised logits */
    double t_first;
    srv_req *next_wait;
    int wake_queued;         /* (under the lock) in the waker thread's list */

    /* shared with the connection thread, under the scheduler's lock */
    req_output out;
    int finished;            /* no more output will come */
    const char *finish_reason; /* "stop" or "length" (NULL on error) */
    int err_status;          /* nonzero: failed (503 shutting down or KV full, 500 engine error) */
    char err_msg[200];
    int cancelled;           /* the client went away */
    int refs;
    int efd;                 /* eventfd: written when output or the end is there */
};

typedef struct sched sched;
struct metrics;

typedef struct {
    int n_batch;             /* entries per step (the session's n_batch) */
    int parallel;            /* sequences at once (the session's n_seq_max) */
    int max_queue;           /* waiting requests beyond which submissions get 503 */
    int profile;             /* time every step op by op (profile.h) */
    int host_threads;        /* helper threads for host sampling and constrained masks (pool.h); 0: none */
    int prepare_masks;       /* they prepare the step's masks while it runs (GPU backends) */
} sched_params;

sched *sched_new(dp_model *m, dp_session *s, const sched_params *p, struct metrics *met);
/* Shutting down: no new requests; waiting ones get 503; running ones finish
 * or are cancelled when grace seconds have passed (a second call can only
 * shorten the grace). */
void sched_drain(sched *q, double grace);
/* After sched_drain: waits until the thread has ended every request. The
 * connections may still hold (and release) their requests afterwards. */
void sched_join(sched *q);
/* Drains with no grace if that was not done, joins, frees. */
void sched_free(sched *q);

/* A new request with its efd; refs = 1 (the caller's). */
srv_req *srv_req_new(void);
/* The next choice of lead's prompt (not yet submitted): lead's
 * parameters, prompt, id and limits, its eventfd; its own sampler, detok
 * and constraint are the caller's to make. refs = 1 (the caller's). */
srv_req *srv_req_choice(srv_req *lead);
/* The lead of the next prompt of first's request (not yet submitted):
 * first's parameters, id and eventfd; its prompt, limits, sampler, detok
 * and constraint are the caller's to make. refs = 1 (the caller's). */
srv_req *srv_req_prompt(srv_req *first);
/* Drops the caller's reference. */
void srv_req_release(sched *q, srv_req *r);
/* A request never submitted; the later choices of a group before its
 * lead, the later prompts before the first. */
void srv_req_destroy(srv_req *r);

/* Queues r (a request's first: all its groups, one place in the queue). 0
 * on success; otherwise the HTTP status to answer (503: queue full or
 * shutting down) with the reason in msg. */
int sched_submit(sched *q, srv_req *r, char *msg, size_t cap);
/* The client is gone: r's sequence (a request's first: all of the
 * request's) is freed within one step, its groups still queued end. */
void sched_cancel(sched *q, srv_req *r);
/* Moves r's pending output into *dst (its old contents dropped); returns
 * r->finished. */
int sched_take(sched *q, srv_req *r, req_output *dst);
/* Whether r has finished (its output may still be waiting to be taken). */
int sched_done(sched *q, srv_req *r);
/* Waits up to timeout_ms for r's next output (a request's first: any of
 * the request's): 1 woken, 0 timeout, -1 the client hung up (r is then
 * cancelled). */
int sched_wait(sched *q, srv_req *r, int timeout_ms);
/* Requests waiting and running now. */
void sched_counts(sched *q, int *waiting, int *running);

#endif

/* The scheduler thread: continuous batching over one session.
 *
 * Each step (1) ends the requests whose client went away and admits
 * waiting ones into free sequences, attaching the longest cached prefix of
 * their prompt, (2) builds one batch: a decode entry for every running
 * request past its prompt, then prompt chunks of the others in admission
 * order while the step has room, (3) runs dp_eval_batch, and (4) turns the
 * sampled tokens into text under the lock and hands the requests with new
 * output to the waker thread, which writes their eventfds while the next
 * step runs: a wake-up is a system call per connection, and on a GPU the
 * engine idles through everything the scheduler does between two steps.
 *
 * Prompt chunks hold MIN_ROWS rows or more (a whole shorter prompt is one
 * chunk), and never leave fewer than MIN_ROWS for later: the CPU backend
 * picks its kernels by the rows a sequence has in a pass (one, a few,
 * many), so this keeps every prompt position on the same kernels whatever
 * else is in the batch or how the prompt was cut, and a request's greedy
 * output equals its output alone and `doppler run`'s.
 *
 * An input of /v1/embeddings (embed.c) is a prompt alone: its rows ask for
 * the hidden states its pooling reads instead of a token, and it ends once
 * its last position is computed. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "scheduler.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embed.h"
#include "pool.h"
#include "metrics.h"
#include "profile.h"
#include "textout.h"

#define MIN_ROWS 8

enum { ST_NEW, ST_WAITING, ST_RUNNING, ST_DONE };

struct sched {
    dp_model *m;
    dp_session *s;
    int V, E, n_ctx, page;
    sched_params p;
    metrics *met;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pthread_t th;
    srv_req *wait_head, *wait_tail;
    int n_wait;
    srv_req **run;           /* running requests, in admission order */
    int n_run;
    int draining, exiting, joined;
    double deadline;         /* draining: running requests are cancelled after this */
    /* the step's batch */
    dp_batch_entry *e;
    int32_t *out;
    srv_req **owner;         /* per entry */
    unsigned char *want;     /* per entry: its next token is wanted */
    srv_req **sampled;       /* requests that got a token this step */
    /* the waker thread: requests whose connections it wakes (each holds a
     * reference until then) */
    pthread_t waker;
    pthread_cond_t wake_cv;
    srv_req **wake;
    int n_wake, cap_wake, wake_exit;
    serve_prof *prof;        /* --profile: every step timed op by op (the scheduler thread's) */
    host_pool *pool;         /* helper threads (pool.h), or NULL */
    int prepare;             /* the pool prepares the step's masks while it runs (GPU backends) */
    dp_constraint **prep;    /* per entry at most: the constraints being prepared */
    int *rows;               /* per entry at most: the wanted entries of a step, for collect */
    float *hid;              /* per entry at most: the hidden state an embedding input pools (E floats) */
};

/* ------------------------------------------------------------ requests */

static void output_clear(req_output *o) {
    sb_clear(&o->text);
    o->n_pieces = o->n_lp = 0;
}

static void unref_locked(srv_req *r) {
    if (--r->refs == 0) srv_req_destroy(r);
}

void srv_req_release(sched *q, srv_req *r) {
    pthread_mutex_lock(&q->lock);
    unref_locked(r);
    pthread_mutex_unlock(&q->lock);
}

static void notify(srv_req *r) {
    uint64_t one = 1;
    ssize_t k = write(r->efd, &one, sizeof one);
    (void)k; /* a full counter (never in practice) still reads as woken */
}

/* Under the lock, on the scheduler thread: r's connection is woken by the
 * waker thread (at once if the list cannot grow). */
static void wake_later(sched *q, srv_req *r) {
    if (r->wake_queued) return;
    if (q->n_wake == q->cap_wake) {
        int cap = q->cap_wake ? 2 * q->cap_wake : 64;
        srv_req **w = realloc(q->wake, sizeof *w * (size_t)cap);
        if (!w) {
            notify(r);
            return;
        }
        q->wake = w;
        q->cap_wake = cap;
    }
    r->wake_queued = 1;
    r->refs++;
    q->wake[q->n_wake++] = r;
}

static void *waker_main(void *arg) {
    sched *q = arg;
    srv_req **mine = NULL;
    int cap = 0;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->n_wake && !q->wake_exit) pthread_cond_wait(&q->wake_cv, &q->lock);
        if (!q->n_wake) break;
        srv_req **w = q->wake;
        int n = q->n_wake, c = q->cap_wake;
        q->wake = mine, q->cap_wake = cap, q->n_wake = 0;
        mine = w, cap = c;
        for (int i = 0; i < n; i++) mine[i]->wake_queued = 0;
        pthread_mutex_unlock(&q->lock);
        for (int i = 0; i < n; i++) notify(mine[i]);
        pthread_mutex_lock(&q->lock);
        for (int i = 0; i < n; i++) unref_locked(mine[i]);
    }
    pthread_mutex_unlock(&q->lock);
    free(mine);
    return NULL;
}

/* Under the lock: no more output for r; its sequence goes back (its full
 * pages stay cached for later prompts). The scheduler thread's calls
 * (later = 1) leave the wake-up to the waker thread. */
static void finish_as(sched *q, srv_req *r, const char *reason, int status, const char *msg, int later) {
    if (r->state == ST_DONE) return;
    r->state = ST_DONE;
    r->finished = 1;
    r->finish_reason = reason;
    r->err_status = status;
    if (msg) snprintf(r->err_msg, sizeof r->err_msg, "%s", msg);
    if (r->seq >= 0) dp_seq_free(q->s, r->seq);
    r->seq = -1;
    if (later) wake_later(q, r);
    else notify(r);
    if (r->lead_parked) { /* the later choices that wait for its prompt end with it */
        r->lead_parked = 0;
        for (int i = 0; i < r->n_follow; i++) finish_as(q, r->follow[i], reason, status, msg, later);
    }
}

/* From the scheduler thread. */
static void end_req(sched *q, srv_req *r, const char *reason, int status, const char *msg) {
    finish_as(q, r, reason, status, msg, 1);
}

/* Under the lock: drops finished requests from the running list. */
static void sweep(sched *q) {
    int k = 0;
    for (int i = 0; i < q->n_run; i++) {
        srv_req *r = q->run[i];
        if (r->state == ST_DONE) unref_locked(r);
        else q->run[k++] = r;
    }
    q->n_run = k;
}

/* Under the lock: a group taken out of the queue ends with its request's
 * later groups (all queued behind it), and their queue references go. */
static void end_queued(sched *q, srv_req *r, int status, const char *msg, int later) {
    while (r) {
        srv_req *m[REQ_MAX_N], *next = r->next_prompt; /* alive: it holds its queue reference */
        const int n = 1 + r->n_follow;
        m[0] = r;
        memcpy(m + 1, r->follow, sizeof *m * (size_t)r->n_follow);
        for (int i = 0; i < n; i++) finish_as(q, m[i], NULL, status, msg, later);
        for (int i = n - 1; i >= 0; i--) unref_locked(m[i]); /* the later choices hold the lead: it goes last */
        r = next;
    }
}

static srv_req *pop_waiting(sched *q) {
    srv_req *r = q->wait_head;
    if (!r) return NULL;
    q->wait_head = r->next_wait;
    if (!q->wait_head) q->wait_tail = NULL;
    r->next_wait = NULL;
    q->n_wait--;
    return r;
}

/* Under the lock: the group at the head of the queue leaves it, and its
 * request's next prompt takes its place (the request keeps its one place
 * until its last group is admitted). */
static void take_head(sched *q) {
    srv_req *r = q->wait_head, *next = r->next_prompt;
    if (!next) {
        pop_waiting(q);
        return;
    }
    next->next_wait = r->next_wait;
    r->next_wait = NULL;
    q->wait_head = next;
    if (q->wait_tail == r) q->wait_tail = next;
}

int sched_submit(sched *q, srv_req *r, char *msg, size_t cap) {
    pthread_mutex_lock(&q->lock);
    int status = 0;
    if (q->draining || q->exiting) {
        snprintf(msg, cap, "the server is shutting down");
        status = 503;
    } else if (q->n_wait >= q->p.max_queue) {
        snprintf(msg, cap, "%d requests are waiting already (the limit); retry later", q->n_wait);
        status = 503;
    } else {
        for (srv_req *g = r; g; g = g->next_prompt) {
            g->refs++;
            g->state = ST_WAITING;
            for (int i = 0; i < g->n_follow; i++) g->follow[i]->refs++, g->follow[i]->state = ST_WAITING;
        }
        if (q->wait_tail) q->wait_tail->next_wait = r;
        else q->wait_head = r;
        q->wait_tail = r;
        q->n_wait++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->lock);
    return status;
}

void sched_cancel(sched *q, srv_req *r) {
    pthread_mutex_lock(&q->lock);
    srv_req *queued = NULL; /* the request's group in the queue: its first not yet admitted */
    for (srv_req *g = r; g; g = g->next_prompt) {
        g->cancelled = 1;
        for (int i = 0; i < g->n_follow; i++) g->follow[i]->cancelled = 1;
        if (!queued && g->state == ST_WAITING) queued = g;
    }
    if (queued) { /* not started: unlink it now, and end the groups behind it */
        srv_req **pp = &q->wait_head, *prev = NULL;
        while (*pp && *pp != queued) prev = *pp, pp = &(*pp)->next_wait;
        if (*pp) {
            *pp = queued->next_wait;
            if (q->wait_tail == queued) q->wait_tail = prev;
            q->n_wait--;
            end_queued(q, queued, 0, NULL, 0);
        }
    }
    pthread_mutex_unlock(&q->lock);
}

int sched_take(sched *q, srv_req *r, req_output *dst) {
    output_clear(dst);
    pthread_mutex_lock(&q->lock);
    req_output t = r->out;
    r->out = *dst;
    *dst = t;
    int fin = r->finished;
    pthread_mutex_unlock(&q->lock);
    return fin;
}

int sched_done(sched *q, srv_req *r) {
    pthread_mutex_lock(&q->lock);
    int fin = r->finished;
    pthread_mutex_unlock(&q->lock);
    return fin;
}

int sched_wait(sched *q, srv_req *r, int timeout_ms) {
    struct pollfd fds[2] = {{.fd = r->efd, .events = POLLIN}, {.fd = r->client_fd, .events = POLLRDHUP}};
    int n = poll(fds, r->client_fd >= 0 ? 2 : 1, timeout_ms);
    if (n <= 0) return 0;
    if (fds[0].revents & POLLIN) {
        uint64_t v;
        ssize_t k = read(r->efd, &v, sizeof v);
        (void)k;
        return 1;
    }
    if (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        sched_cancel(q, r);
        return -1;
    }
    return 0;
}

void sched_counts(sched *q, int *waiting, int *running) {
    pthread_mutex_lock(&q->lock);
    *waiting = q->n_wait;
    *running = q->n_run;
    pthread_mutex_unlock(&q->lock);
}

/* --------------------------------------------------------------- steps */

/* Under the lock: the client went away, or the drain's grace ran out. */
static void reap(sched *q) {
    int late = q->draining && dp_time_s() >= q->deadline;
    for (int i = 0; i < q->n_run; i++) {
        srv_req *r = q->run[i];
        if (r->cancelled) end_req(q, r, NULL, 0, NULL);
        else if (late) end_req(q, r, NULL, 503, "the server is shutting down");
    }
    sweep(q);
}

/* The longest cached prefix of r's prompt into its (empty) sequence, but
 * never so long that fewer than MIN_ROWS prompt rows are left. An
 * embedding that pools more than the last position computes them all. */
static void attach_prefix(sched *q, srv_req *r) {
    int c = r->emb && r->pooling != DP_POOLING_LAST ? 0 : dp_seq_reuse_prefix(q->s, r->seq, r->prompt, r->n_prompt);
    int keep = c > 0 ? c : 0;
    while (keep > 0 && r->n_prompt - keep < MIN_ROWS) keep -= q->page;
    if (keep < 0) keep = 0;
    if (keep != c && c > 0) dp_seq_truncate(q->s, r->seq, keep);
    r->pos = r->n_cached = keep;
    metrics_admit(q->met, r->n_prompt, keep);
}

/* The most of r's prompt attach_prefix can take once it is all cached. */
static int best_prefix(const sched *q, const srv_req *r) {
    int k = r->n_prompt - MIN_ROWS;
    return k > 0 ? k / q->page * q->page : 0;
}

/* On the scheduler thread: the lead has computed its prompt, so its later
 * choices find its pages in the prefix cache. */
static void unpark(sched *q, srv_req *r) {
    r->lead_parked = 0;
    for (int i = 0; i < r->n_follow; i++) {
        r->follow[i]->parked = 0;
        attach_prefix(q, r->follow[i]);
    }
}

/* Under the lock: waiting groups into free sequences, each whole (in
 * queue order: a group waits for as many free sequences as it has choices,
 * and no later request passes it; a request of several prompts admits them
 * a group after another as sequences free up). */
static void admit(sched *q) {
    while (q->wait_head && q->n_run + 1 + q->wait_head->n_follow <= q->p.parallel) {
        srv_req *r = q->wait_head;
        int ok = 1;
        for (int i = -1; i < r->n_follow && ok; i++) {
            srv_req *m = i < 0 ? r : r->follow[i];
            ok = (m->seq = dp_seq_new(q->s)) >= 0;
        }
        if (!ok) {
            pop_waiting(q);
            end_queued(q, r, 500, dp_last_error(), 1);
            continue;
        }
        take_head(q);
        attach_prefix(q, r);
        r->state = ST_RUNNING;
        q->run[q->n_run++] = r;
        /* the later choices wait a step for the pages the lead is about to compute, unless it computes none they
         * could share (a short prompt, or one the cache holds already) */
        const int park = r->pos < best_prefix(q, r);
        r->lead_parked = park && r->n_follow;
        for (int i = 0; i < r->n_follow; i++) {
            srv_req *f = r->follow[i];
            f->state = ST_RUNNING;
            q->run[q->n_run++] = f;
            if (park) f->parked = 1;
            else attach_prefix(q, f);
        }
    }
}

static void add_entry(sched *q, int *n, srv_req *r, int pos, int32_t tok, int want) {
    int wl = want && (r->p.logprobs || r->host_sample);
    const int engine = want && !r->host_sample; /* the engine draws, under the constraint if any */
    q->e[*n] = (dp_batch_entry){.seq = r->seq, .pos = pos, .token = tok, .logits = wl,
                                .sampler = engine ? r->smp : NULL, .constraint = engine ? r->cons : NULL};
    q->owner[*n] = r;
    q->want[*n] = (unsigned char)want;
    (*n)++;
}

/* The step's entries: decode rows first, then prompt chunks (unless
 * with_prompts is 0). */
static int build(sched *q, int with_prompts, int *n_prompt_rows, int *n_prompt_seqs) {
    int n = 0;
    for (int i = 0; i < q->n_run; i++) {
        srv_req *r = q->run[i];
        if (r->pos >= r->n_prompt && !r->emb) add_entry(q, &n, r, r->pos, r->next, 1);
    }
    *n_prompt_rows = *n_prompt_seqs = 0;
    if (!with_prompts) return n;
    int budget = q->p.n_batch - n;
    for (int i = 0; i < q->n_run && budget >= MIN_ROWS; i++) {
        srv_req *r = q->run[i];
        int rem = r->n_prompt - r->pos;
        if (rem <= 0 || r->parked) continue;
        int k = rem <= budget ? rem : (budget < rem - MIN_ROWS ? budget : rem - MIN_ROWS);
        if (k < rem && k < MIN_ROWS) continue;
        for (int j = 0; j < k; j++) {
            const int p = r->pos + j;
            add_entry(q, &n, r, p, r->prompt[p], !r->emb && p == r->n_prompt - 1);
            if (r->emb && embed_wants(r, p)) q->e[n - 1].hidden = q->hid + (size_t)(n - 1) * (size_t)q->E;
        }
        budget -= k;
        *n_prompt_rows += k;
        (*n_prompt_seqs)++;
    }
    return n;
}

/* Entry i's token: drawn by the engine (under a constraint too), or here
 * for penalties and logit_bias; its log probabilities. Touches request i
 * alone (the pool runs several at once). */
static void sample_row(void *arg, int k) {
    sched *q = arg;
    const int i = q->rows[k];
    srv_req *r = q->owner[i];
    const float *lg = r->p.logprobs || r->host_sample ? dp_batch_logits(q->s, i) : NULL;
    int32_t tok = q->out[i];
    if (r->host_sample) {
        memcpy(r->work, lg, sizeof(float) * (size_t)q->V);
        pen_apply(r, r->work);
        tok = r->cons ? dp_constraint_sample(r->cons, r->smp, r->work, q->V) : dp_sampler_sample(r->smp, r->work);
    }
    if (r->p.logprobs) {
        lp_compute(lg, q->V, tok, r->p.top_logprobs, &r->lp_cur);
        r->lp_ok = 1;
    }
    r->next = tok;
}

static void prepare_row(void *arg, int k) { dp_constraint_prepare(((sched *)arg)->prep[k]); }

/* After a good dp_eval_batch, without the lock: positions advance; the
 * wanted tokens are sampled and their log probabilities computed, the
 * rows with host work on the pool's threads when there are several. */
static int collect(sched *q, int n) {
    int ns = 0, n_host = 0;
    for (int i = 0; i < n; i++) {
        srv_req *r = q->owner[i];
        if (q->e[i].hidden) embed_add(r, q->e[i].hidden, q->E);
        r->pos++;
        if (!q->want[i]) continue;
        q->rows[ns] = i;
        q->sampled[ns++] = r;
        n_host += r->host_sample || r->p.logprobs;
    }
    if (q->pool && n_host > 1) pool_run(q->pool, sample_row, q, ns);
    else
        for (int k = 0; k < ns; k++) sample_row(q, k);
    for (int k = 0; k < ns; k++)
        if (q->sampled[k]->lead_parked) unpark(q, q->sampled[k]); /* its prompt's last row was in this step */
    return ns;
}

/* Under the lock: the sampled tokens become text; finished requests end. */
static int deliver(sched *q, int ns) {
    double now = dp_time_s();
    int n_gen = 0;
    for (int i = 0; i < ns; i++) {
        srv_req *r = q->sampled[i];
        if (r->state != ST_RUNNING || r->cancelled) continue;
        int32_t tok = r->next;
        if (tok < 0) { /* the constraint found no token (dp_constraint_sample) */
            end_req(q, r, NULL, 500, "response_format: no token can continue the answer");
            continue;
        }
        dp_sampler_accept(r->smp, tok);
        if (r->cons) dp_constraint_accept(r->cons, tok);
        if (r->host_sample) pen_count(r, tok);
        n_gen++;
        if (++r->n_gen == 1) {
            r->t_first = now;
            if (!r->lead && !r->first) metrics_ttft(q->met, now - r->t_submit); /* once per request: its first leads */
        }
        const char *why = NULL;
        if (!r->p.ignore_eos && dp_token_is_eog(q->m, tok)) {
            r->lp_ok = 0;
            text_finish(r);
            why = "stop";
        } else if (text_add_token(r, tok)) {
            why = "stop";
        } else if (r->cons && dp_constraint_done(r->cons)) { /* the value is complete: nothing may follow */
            text_finish(r);
            why = "stop";
        } else if (r->n_gen >= r->max_tokens || r->pos >= q->n_ctx) {
            why = text_finish(r) ? "stop" : "length";
        }
        if (why) end_req(q, r, why, 0, NULL);
        else if (r->out.n_pieces) wake_later(q, r);
    }
    return n_gen;
}

/* Under the lock: the embedding inputs whose prompt is computed end (their
 * hidden states are pooled). */
static void end_embedded(sched *q) {
    for (int i = 0; i < q->n_run; i++)
        if (q->run[i]->emb && q->run[i]->pos >= q->run[i]->n_prompt) end_req(q, q->run[i], "stop", 0, NULL);
}

/* Under the lock: the newest running request gives way (the KV pool is
 * full even for decode rows alone); a parked choice holds no page. */
static void preempt(sched *q) {
    for (int i = q->n_run - 1; i >= 0; i--)
        if (!q->run[i]->parked) {
            end_req(q, q->run[i], NULL, 503, "the KV cache is full; retry later");
            break;
        }
    sweep(q);
}

static void publish_kv(sched *q) {
    dp_kv_stats kv;
    dp_session_kv_stats(q->s, &kv);
    metrics_kv(q->met, &kv);
}

static void *sched_main(void *arg) {
    sched *q = arg;
    double ph[PH_N] = {0}; /* host work by part since the last report */
    pthread_mutex_lock(&q->lock);
    for (;;) {
        if (q->n_wake) pthread_cond_signal(&q->wake_cv); /* the last step's output */
        while (!q->n_run && !q->wait_head && !q->draining && !q->exiting) pthread_cond_wait(&q->cv, &q->lock);
        double t = dp_time_s();
        reap(q);
        if (!q->draining) admit(q);
        if (!q->n_run) {
            publish_kv(q); /* the pages of requests that just ended */
            if (q->draining || q->exiting) {
                if (q->n_wake) pthread_cond_signal(&q->wake_cv);
                break;
            }
            continue;
        }
        pthread_mutex_unlock(&q->lock);

        double t1 = dp_time_s();
        int n_prompt_rows, n_prompt_seqs, n = build(q, 1, &n_prompt_rows, &n_prompt_seqs);
        /* the masks of the tokens this step samples under a constraint, worked out while it runs */
        int n_prep = 0;
        for (int i = 0; q->prepare && i < n; i++)
            if (q->want[i] && q->owner[i]->cons) q->prep[n_prep++] = q->owner[i]->cons;
        if (n_prep) pool_start(q->pool, prepare_row, q, n_prep);
        double t0 = dp_time_s();
        int rc = n ? dp_eval_batch(q->s, q->e, n, q->out) : DP_OK;
        if (rc == DP_ERR_KV_FULL && n_prompt_rows) { /* decode rows alone, prompts wait */
            n = build(q, 0, &n_prompt_rows, &n_prompt_seqs);
            rc = n ? dp_eval_batch(q->s, q->e, n, q->out) : DP_OK;
        }
        if (n_prep) pool_wait(q->pool);
        double t2 = dp_time_s();
        if (q->prof && rc == DP_OK && n) serve_prof_step(q->prof, n_prompt_rows, n - n_prompt_rows, n_prompt_seqs, t2 - t0);
        int ns = rc == DP_OK ? collect(q, n) : 0;
        double t3 = dp_time_s();

        pthread_mutex_lock(&q->lock);
        double t4 = dp_time_s();
        int n_gen = 0;
        if (rc == DP_ERR_KV_FULL) {
            preempt(q);
        } else if (rc != DP_OK) { /* the engine failed: the requests of this step end with its error */
            for (int i = 0; i < n; i++) end_req(q, q->owner[i], NULL, 500, dp_last_error());
            sweep(q);
        } else {
            n_gen = deliver(q, ns);
            end_embedded(q);
            sweep(q);
        }
        double t5 = dp_time_s();
        if (rc == DP_OK) metrics_step(q->met, n_prompt_rows, n - n_prompt_rows, n_gen, t2 - t0);
        publish_kv(q);
        ph[PH_ADMIT] += t1 - t, ph[PH_BUILD] += t0 - t1, ph[PH_COLLECT] += t3 - t2;
        ph[PH_LOCK] += t4 - t3, ph[PH_DELIVER] += t5 - t4;
        metrics_host(q->met, ph);
        memset(ph, 0, sizeof ph);
        ph[PH_METRICS] = dp_time_s() - t5;
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* Ends the waker thread once it has woken everything queued. */
static void stop_waker(sched *q) {
    pthread_mutex_lock(&q->lock);
    q->wake_exit = 1;
    pthread_cond_signal(&q->wake_cv);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->waker, NULL);
}

/* What sched_new made, its threads stopped. */
static void sched_release(sched *q) {
    serve_prof_finish(q->prof);
    pool_free(q->pool);
    free(q->e), free(q->out), free(q->owner), free(q->want), free(q->sampled), free(q->run), free(q->prep);
    free(q->rows), free(q->wake), free(q->hid);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->wake_cv);
    free(q);
}

sched *sched_new(dp_model *m, dp_session *s, const sched_params *p, metrics *met) {
    sched *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->m = m;
    q->s = s;
    q->p = *p;
    q->met = met;
    q->V = dp_model_get_info(m)->n_vocab;
    q->E = dp_model_get_info(m)->n_embd;
    q->n_ctx = dp_session_ctx(s);
    dp_kv_stats kv;
    dp_session_kv_stats(s, &kv);
    q->page = kv.page_size > 0 ? kv.page_size : 16;
    size_t n = (size_t)p->n_batch;
    q->e = calloc(n, sizeof *q->e);
    q->out = calloc(n, sizeof *q->out);
    q->owner = calloc(n, sizeof *q->owner);
    q->want = calloc(n, 1);
    q->sampled = calloc(n, sizeof *q->sampled);
    q->run = calloc((size_t)p->parallel, sizeof *q->run);
    q->prep = calloc(n, sizeof *q->prep);
    q->rows = calloc(n, sizeof *q->rows);
    q->hid = malloc(n * (size_t)q->E * sizeof *q->hid); /* touched only by embeddings */
    /* without helpers (none asked for, or none started) the scheduler thread does it all */
    if (p->host_threads > 0) q->pool = pool_new(p->host_threads);
    q->prepare = q->pool && p->prepare_masks;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->wake_cv, NULL);
    if (!q->e || !q->out || !q->owner || !q->want || !q->sampled || !q->run || !q->prep || !q->rows || !q->hid ||
        (p->profile && !(q->prof = serve_prof_new(s, stderr))) || pthread_create(&q->waker, NULL, waker_main, q)) {
        sched_release(q);
        return NULL;
    }
    if (pthread_create(&q->th, NULL, sched_main, q)) {
        stop_waker(q);
        sched_release(q);
        return NULL;
    }
    return q;
}

void sched_drain(sched *q, double grace) {
    pthread_mutex_lock(&q->lock);
    if (!q->draining) {
        q->draining = 1;
        q->deadline = dp_time_s() + grace;
    } else if (dp_time_s() + grace < q->deadline) {
        q->deadline = dp_time_s() + grace;
    }
    srv_req *r;
    while ((r = pop_waiting(q))) end_queued(q, r, 503, "the server is shutting down", 0);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->lock);
}

void sched_join(sched *q) {
    pthread_mutex_lock(&q->lock);
    int joined = q->joined;
    q->exiting = q->joined = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->lock);
    if (!joined) {
        pthread_join(q->th, NULL);
        stop_waker(q);
    }
}

void sched_free(sched *q) {
    if (!q) return;
    sched_drain(q, 0);
    sched_join(q);
    sched_release(q);
}

/* Prometheus counters, gauges and the time-to-first-token histogram. */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 64        /* route x status pairs; routes are a fixed set */
#define WINDOW 10            /* seconds the tok/s gauges average over */

static const double ttft_le[] = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define N_LE (int)(sizeof ttft_le / sizeof ttft_le[0])

typedef struct {
    char route[32];
    int status;
    uint64_t n;
} series;

struct metrics {
    pthread_mutex_t lock;
    series req[MAX_SERIES];
    int n_req;
    uint64_t admitted, prompt_tokens, cached_tokens, gen_tokens, prefill_rows, decode_rows, steps;
    double busy_s, decode_busy_s, host_s[PH_N];
    uint64_t decode_steps;
    uint64_t ttft_count[N_LE + 1];
    double ttft_sum;
    uint64_t ttft_n;
    dp_kv_stats kv;
    int64_t win_sec[WINDOW];
    uint64_t win_prefill[WINDOW], win_gen[WINDOW];
};

metrics *metrics_new(void) {
    metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->lock, NULL);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void metrics_request(metrics *m, const char *route, int status) {
    pthread_mutex_lock(&m->lock);
    int i = 0;
    while (i < m->n_req && (m->req[i].status != status || strcmp(m->req[i].route, route))) i++;
    if (i == m->n_req && i < MAX_SERIES) {
        snprintf(m->req[i].route, sizeof m->req[i].route, "%s", route);
        m->req[i].status = status;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_admit(metrics *m, int n_prompt, int n_cached) {
    pthread_mutex_lock(&m->lock);
    m->admitted++;
    m->prompt_tokens += (uint64_t)n_prompt;
    m->cached_tokens += (uint64_t)n_cached;
    pthread_mutex_unlock(&m->lock);
}

void metrics_kv(metrics *m, const dp_kv_stats *kv) {
    pthread_mutex_lock(&m->lock);
    m->kv = *kv;
    pthread_mutex_unlock(&m->lock);
}

void metrics_step(metrics *m, int n_prefill, int n_decode, int n_gen, double seconds) {
    int64_t sec = (int64_t)floor(dp_time_s());
    int b = (int)(sec % WINDOW);
    pthread_mutex_lock(&m->lock);
    m->prefill_rows += (uint64_t)n_prefill;
    m->decode_rows += (uint64_t)n_decode;
    m->gen_tokens += (uint64_t)n_gen;
    m->steps++;
    m->busy_s += seconds;
    if (!n_prefill) {
        m->decode_steps++;
        m->decode_busy_s += seconds;
    }
    if (m->win_sec[b] != sec) {
        m->win_sec[b] = sec;
        m->win_prefill[b] = m->win_gen[b] = 0;
    }
    m->win_prefill[b] += (uint64_t)n_prefill;
    m->win_gen[b] += (uint64_t)n_gen;
    pthread_mutex_unlock(&m->lock);
}

void metrics_ttft(metrics *m, double s) {
    pthread_mutex_lock(&m->lock);
    int i = 0;
    while (i < N_LE && s > ttft_le[i]) i++;
    m->ttft_count[i]++;
    m->ttft_sum += s;
    m->ttft_n++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_host(metrics *m, const double seconds[PH_N]) {
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < PH_N; i++) m->host_s[i] += seconds[i];
    pthread_mutex_unlock(&m->lock);
}

static void head(sbuf *o, const char *name, const char *type, const char *help) {
    sb_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(sbuf *o, const char *name, const char *type, const char *help, double v) {
    head(o, name, type, help);
    sb_printf(o, "%s %.17g\n", name, v);
}

void metrics_render(metrics *m, sbuf *o, int waiting, int running, int parallel) {
    double now = dp_time_s();
    int64_t sec = (int64_t)floor(now);
    pthread_mutex_lock(&m->lock);
    head(o, "doppler_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (int i = 0; i < m->n_req; i++)
        sb_printf(o, "doppler_requests_total{route=\"%s\",status=\"%d\"} %llu\n", m->req[i].route, m->req[i].status,
                  (unsigned long long)m->req[i].n);
    one(o, "doppler_requests_admitted_total", "counter",
        "Sequences admitted (a completion request takes one per choice).", (double)m->admitted);
    one(o, "doppler_prompt_tokens_total", "counter", "Prompt tokens of admitted sequences (tokens in).",
        (double)m->prompt_tokens);
    one(o, "doppler_prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache.",
        (double)m->cached_tokens);
    one(o, "doppler_generated_tokens_total", "counter", "Tokens generated (tokens out).", (double)m->gen_tokens);
    one(o, "doppler_prefill_tokens_total", "counter", "Prompt positions evaluated.", (double)m->prefill_rows);
    one(o, "doppler_decode_tokens_total", "counter", "Decode positions evaluated.", (double)m->decode_rows);
    one(o, "doppler_engine_steps_total", "counter", "Batched forward passes.", (double)m->steps);
    one(o, "doppler_engine_busy_seconds_total", "counter", "Seconds spent in forward passes.", m->busy_s);
    one(o, "doppler_engine_decode_steps_total", "counter", "Forward passes of decode rows only.",
        (double)m->decode_steps);
    one(o, "doppler_engine_decode_busy_seconds_total", "counter", "Seconds spent in forward passes of decode rows only.",
        m->decode_busy_s);
    static const char *const part[PH_N] = {"admit", "build", "collect", "lock", "deliver", "metrics"};
    head(o, "doppler_scheduler_host_seconds_total", "counter",
         "Seconds the scheduler spent between forward passes while requests ran, by part.");
    for (int i = 0; i < PH_N; i++)
        sb_printf(o, "doppler_scheduler_host_seconds_total{part=\"%s\"} %.17g\n", part[i], m->host_s[i]);
    one(o, "doppler_queue_length", "gauge", "Requests waiting for their sequences.", waiting);
    one(o, "doppler_running_sequences", "gauge", "Sequences being evaluated.", running);
    one(o, "doppler_max_sequences", "gauge", "Sequences the server runs at once (--parallel).", parallel);
    head(o, "doppler_kv_pages", "gauge", "KV cache pages by state (used by sequences, cached prefix, free).");
    sb_printf(o, "doppler_kv_pages{state=\"used\"} %d\ndoppler_kv_pages{state=\"cached\"} %d\n"
                 "doppler_kv_pages{state=\"free\"} %d\n", m->kv.used, m->kv.cached, m->kv.free);
    one(o, "doppler_kv_pages_shared", "gauge", "KV pages used by more than one sequence.", m->kv.shared);
    one(o, "doppler_kv_pages_total", "gauge", "KV cache pages in the pool.", m->kv.n_pages);
    one(o, "doppler_kv_page_size", "gauge", "Positions per KV page.", m->kv.page_size);
    uint64_t pre = 0, gen = 0;
    for (int b = 0; b < WINDOW; b++)
        if (m->win_sec[b] > sec - WINDOW) pre += m->win_prefill[b], gen += m->win_gen[b];
    double span = WINDOW - 1 + (now - (double)sec);
    one(o, "doppler_prefill_tokens_per_second", "gauge", "Prompt positions evaluated per second, last 10 s.",
        pre / span);
    one(o, "doppler_decode_tokens_per_second", "gauge", "Tokens generated per second, last 10 s.", gen / span);
    head(o, "doppler_time_to_first_token_seconds", "histogram",
         "From a request's arrival to its first generated token.");
    uint64_t cum = 0;
    for (int i = 0; i < N_LE; i++) {
        cum += m->ttft_count[i];
        sb_printf(o, "doppler_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", ttft_le[i],
                  (unsigned long long)cum);
    }
    cum += m->ttft_count[N_LE];
    sb_printf(o, "doppler_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    sb_printf(o, "doppler_time_to_first_token_seconds_sum %.17g\ndoppler_time_to_first_token_seconds_count %llu\n",
              m->ttft_sum, (unsigned long long)m->ttft_n);
    pthread_mutex_unlock(&m->lock);
}

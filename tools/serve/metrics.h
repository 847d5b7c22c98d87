/* Server counters for GET /metrics (Prometheus text format 0.0.4). */
#ifndef SERVE_METRICS_H
#define SERVE_METRICS_H

#include "doppler.h"
#include "jsonw.h"

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);

/* An answered request: its route ("/v1/completions", ...; "other") and status. */
void metrics_request(metrics *m, const char *route, int status);
/* A request admitted: prompt tokens, of which cached (prefix cache). */
void metrics_admit(metrics *m, int n_prompt, int n_cached);
/* One engine step: prompt rows, decode rows, tokens generated, seconds. */
void metrics_step(metrics *m, int n_prefill, int n_decode, int n_gen, double seconds);

/* The scheduler's host work between two forward passes while requests run,
 * by part: on a GPU the engine idles through all of it. */
enum { PH_ADMIT, PH_BUILD, PH_COLLECT, PH_LOCK, PH_DELIVER, PH_METRICS, PH_N };
void metrics_host(metrics *m, const double seconds[PH_N]);
/* The KV page pool now. */
void metrics_kv(metrics *m, const dp_kv_stats *kv);
void metrics_ttft(metrics *m, double seconds);

/* The exposition text, with the queue and running gauges given. */
void metrics_render(metrics *m, sbuf *out, int waiting, int running, int parallel);

#endif

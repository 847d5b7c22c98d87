/* Sessions: backend choice, context limits, batching of long inputs,
 * statistics and the trace configuration. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prof.h"
#include "trace.h"
#include "util.h"

void dp_session_params_default(dp_session_params *p) {
    memset(p, 0, sizeof *p);
    p->backend = DP_BACKEND_AUTO;
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

#ifdef DOPPLER_HAVE_CUDA
/* The ops of the newer families the CUDA kernels do not have: such a model
 * runs on the CPU (auto) or is refused (explicit CUDA), never computed
 * without them. NULL when CUDA can run the model. */
static const char *cuda_gap(const dp_model *m) {
    const dp_hparams *hp = &m->hp;
    if (hp->attn_softcap != 0.0f || hp->final_softcap != 0.0f) return "soft-capping";
    if (m->rope_long.data || hp->rope_attn_factor != 1.0f) return "LongRoPE";
    for (int l = 0; l < hp->n_layer; l++)
        if (!hp->layers[l].rope) return "layers without RoPE";
    return NULL;
}
#endif

dp_session *dp_session_new(dp_model *m, const dp_session_params *pp) {
    dp_session_params p;
    if (pp) p = *pp;
    else dp_session_params_default(&p);
    const dp_hparams *hp = &m->hp;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0) {
        dp_set_error(DP_ERR_ARG, "context, batch and thread counts must not be negative");
        return NULL;
    }
    dp_session *s = dp_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->n_ctx = p.n_ctx ? p.n_ctx : 4096;
    if (s->n_ctx > hp->n_ctx_train) s->n_ctx = hp->n_ctx_train;
    s->n_batch = p.n_batch ? p.n_batch : 512;
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    s->n_threads = p.n_threads ? p.n_threads : default_threads();
    s->logits_all = p.logits_all;

    switch (p.backend) {
    case DP_BACKEND_CPU: s->be = &dp_backend_cpu; break;
    case DP_BACKEND_CUDA:
#ifdef DOPPLER_HAVE_CUDA
        if (!dp_cuda_available()) {
            dp_set_error(DP_ERR_BACKEND, "CUDA backend requested but no usable GPU was found");
            free(s);
            return NULL;
        }
        if (cuda_gap(m)) {
            dp_set_error(DP_ERR_BACKEND, "the CUDA backend has no %s yet (model %s); use the CPU backend",
                         cuda_gap(m), m->recipe.arch);
            free(s);
            return NULL;
        }
        s->be = &dp_backend_cuda;
        break;
#else
        dp_set_error(DP_ERR_BACKEND, "CUDA backend requested but this build has no CUDA support");
        free(s);
        return NULL;
#endif
    default:
#ifdef DOPPLER_HAVE_CUDA
        s->be = dp_cuda_available() && !cuda_gap(m) ? &dp_backend_cuda : &dp_backend_cpu;
#else
        s->be = &dp_backend_cpu;
#endif
    }

    size_t rows = s->logits_all ? (size_t)s->n_batch : 1;
    s->logits = dp_malloc_aligned(rows * (size_t)hp->n_vocab * sizeof(float));
    if (!s->logits || s->be->init(s) != 0) {
        dp_session_free(s);
        return NULL;
    }
    return s;
}

void dp_session_free(dp_session *s) {
    if (!s) return;
    if (s->be && s->be_state) s->be->free(s);
    dp_free_aligned(s->logits);
    free(s->trace_layers);
    free(s->prof);
    free(s);
}

int dp_eval(dp_session *s, const int32_t *tokens, int n) {
    if (n <= 0) return dp_set_error(DP_ERR_ARG, "dp_eval: no tokens");
    if (s->pos + n > s->n_ctx)
        return dp_set_error(DP_ERR_CTX_FULL, "context full: %d tokens in the cache + %d new exceed the context size %d",
                            s->pos, n, s->n_ctx);
    if (s->logits_all && n > s->n_batch)
        return dp_set_error(DP_ERR_ARG, "dp_eval: %d tokens with all logits exceed the batch size %d", n,
                            s->n_batch);
    int n_vocab = s->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return dp_set_error(DP_ERR_ARG, "token id %d at index %d is outside the vocabulary (0..%d)", tokens[i], i,
                                n_vocab - 1);
    double t0 = dp_time_s();
    s->trace_stop = 0;
    for (int done = 0; done < n;) {
        int k = n - done < s->n_batch ? n - done : s->n_batch;
        int rc = s->be->forward(s, tokens + done, k, s->pos, s->logits_all);
        if (!rc && s->trace_stop) rc = dp_set_error(DP_ERR_STOPPED, "stopped by a trace callback");
        if (rc) return rc;
        s->pos += k;
        done += k;
    }
    s->n_logits = s->logits_all ? n : 1;
    double dt = dp_time_s() - t0;
    s->stats.n_eval_calls++;
    if (n > 1) {
        s->stats.n_prefill_tokens += (uint64_t)n;
        s->stats.prefill_s += dt;
    } else {
        s->stats.n_decode_tokens++;
        s->stats.decode_s += dt;
    }
    return DP_OK;
}

int dp_eval_sample(dp_session *s, const int32_t *tokens, int n, dp_sampler *smp, int32_t *next) {
    if (s->be->eval_sample && !s->logits_all && n <= s->n_batch && s->pos + n <= s->n_ctx) {
        for (int i = 0; i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= s->m->hp.n_vocab)
                return dp_set_error(DP_ERR_ARG, "token id %d at index %d is outside the vocabulary", tokens[i], i);
        double t0 = dp_time_s();
        int rc = s->be->eval_sample(s, tokens, n, s->pos, smp, next);
        if (rc) return rc;
        s->pos += n;
        s->n_logits = 0; /* the logits stayed on the device */
        double dt = dp_time_s() - t0;
        s->stats.n_eval_calls++;
        if (n > 1) {
            s->stats.n_prefill_tokens += (uint64_t)n;
            s->stats.prefill_s += dt;
        } else {
            s->stats.n_decode_tokens++;
            s->stats.decode_s += dt;
        }
        return DP_OK;
    }
    int rc = dp_eval(s, tokens, n);
    if (rc) return rc;
    *next = dp_sampler_sample(smp, dp_logits(s, -1));
    return DP_OK;
}

const float *dp_logits(const dp_session *s, int i) {
    if (i < 0) i = s->n_logits - 1;
    if (i < 0 || i >= s->n_logits) return NULL;
    return s->logits + (size_t)i * (size_t)s->m->hp.n_vocab;
}

int dp_session_pos(const dp_session *s) { return s->pos; }
int dp_session_ctx(const dp_session *s) { return s->n_ctx; }
const char *dp_session_backend(const dp_session *s) { return s->be->name; }

int dp_session_truncate(dp_session *s, int pos) {
    if (pos < 0 || pos > s->pos) return dp_set_error(DP_ERR_ARG, "truncate to %d: session holds %d tokens", pos, s->pos);
    s->pos = pos;
    s->n_logits = 0;
    return DP_OK;
}

int dp_session_wait(dp_session *s) {
    if (!s) return dp_set_error(DP_ERR_ARG, "dp_session_wait: no session");
    return s->be->wait ? s->be->wait(s) : DP_OK;
}

void dp_session_get_stats(const dp_session *s, dp_session_stats *out) { *out = s->stats; }

int dp_session_describe(const dp_session *s, dp_backend_info *out) {
    if (!s || !out) return dp_set_error(DP_ERR_ARG, "dp_session_describe: no session or no output");
    const dp_hparams *hp = &s->m->hp;
    memset(out, 0, sizeof *out);
    snprintf(out->backend, sizeof out->backend, "%s", s->be->name);
    snprintf(out->ffn_act, sizeof out->ffn_act, "%s", s->m->recipe.act == DP_ACT_GELU_TANH ? "gelu-tanh" : "silu");
    out->n_threads = s->n_threads;
    out->n_ctx = s->n_ctx;
    int eb = s->be->kv_elem_bytes ? s->be->kv_elem_bytes : 4;
    snprintf(out->kv_type, sizeof out->kv_type, "%s", eb == 4 ? "f32" : eb == 2 ? "f16" : "?");
    /* K and V rows of n_head_kv * head_dim elements in every layer */
    out->kv_bytes_per_token = 2ull * (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * (uint64_t)eb;
    out->kv_bytes = out->kv_bytes_per_token * (uint64_t)s->n_ctx;
    return s->be->describe ? s->be->describe(s, out) : DP_OK;
}

/* ------------------------------------------------------------------ trace */

int dp_session_set_trace(dp_session *s, dp_trace_fn fn, void *user, const dp_trace_filter *f) {
    int L = s->m->hp.n_layer;
    free(s->trace_layers);
    s->trace_layers = NULL;
    s->trace_fn = fn;
    s->trace_user = user;
    s->trace_points = fn ? (f ? f->points : ~0ull) : 0;
    if (fn && f && f->layers) {
        s->trace_layers = dp_calloc((size_t)L, 1);
        if (!s->trace_layers) return DP_ERR_NOMEM;
        for (int i = 0; i < L && i < f->n_layers; i++) s->trace_layers[i] = f->layers[i];
    }
    if (s->be->trace_changed) return s->be->trace_changed(s);
    return DP_OK;
}

int dp_trace_emit(dp_session *s, int point, int layer, int pos0, int n_pos, int dim, const float *data) {
    dp_trace_event ev = {point, layer, pos0, n_pos, dim, data};
    if (!s->trace_stop && s->trace_fn(s->trace_user, &ev)) s->trace_stop = 1;
    return s->trace_stop;
}

static const char *g_point_names[DP_TP_COUNT] = {
    "embed", "embed_scaled", "attn_norm", "q", "k", "v", "q_normed", "k_normed", "q_rope", "k_rope",
    "attn_scores", "attn_out", "o_proj", "post_attn_norm", "resid_attn", "ffn_norm", "gate", "up", "act",
    "down", "post_ffn_norm", "resid_ffn", "final_norm", "logits",
};

const char *dp_trace_point_name(int point) {
    return point >= 0 && point < DP_TP_COUNT ? g_point_names[point] : "?";
}

int dp_trace_point_lookup(const char *name) {
    for (int i = 0; i < DP_TP_COUNT; i++)
        if (strcmp(g_point_names[i], name) == 0) return i;
    return -1;
}

int dp_trace_point_is_layer(int point) { return point >= DP_TP_ATTN_NORM && point <= DP_TP_RESID_FFN; }

/* ---------------------------------------------------------------- profile */

static const char *g_prof_names[PROF_NOPS] = {
    "embed", "rmsnorm", "matmul_qkv", "qk_norm", "rope", "attention", "matmul_o", "matmul_gate_up", "act",
    "matmul_down", "add", "lm_head", "sample", "other",
};

const char *dp_prof_op_name(int op) { return op >= 0 && op < PROF_NOPS ? g_prof_names[op] : "?"; }

void dp_prof_add(dp_session *s, int op, int layer, double ms, uint64_t bytes) {
    int L = s->m->hp.n_layer;
    dp_prof_cell *c = &s->prof[(size_t)op * (size_t)(L + 1) + (size_t)(layer < 0 ? L : layer)];
    c->calls++;
    c->ms += ms;
    c->bytes += bytes;
}

int dp_session_set_profile(dp_session *s, int on) {
    if (!on) {
        free(s->prof);
        s->prof = NULL;
        return DP_OK;
    }
    if (!s->prof) {
        s->prof = dp_calloc((size_t)PROF_NOPS * (size_t)(s->m->hp.n_layer + 1), sizeof(dp_prof_cell));
        if (!s->prof) return DP_ERR_NOMEM;
    }
    return DP_OK;
}

void dp_session_reset_profile(dp_session *s) {
    if (s->prof) memset(s->prof, 0, (size_t)PROF_NOPS * (size_t)(s->m->hp.n_layer + 1) * sizeof(dp_prof_cell));
}

int dp_session_get_profile(const dp_session *s, dp_profile_entry *out, int cap) {
    if (!s->prof) return 0;
    int L = s->m->hp.n_layer, n = 0;
    for (int op = 0; op < PROF_NOPS; op++)
        for (int l = 0; l <= L; l++) {
            const dp_prof_cell *c = &s->prof[(size_t)op * (size_t)(L + 1) + (size_t)l];
            if (!c->calls) continue;
            if (n < cap) {
                out[n].op = g_prof_names[op];
                out[n].layer = l == L ? -1 : l;
                out[n].calls = c->calls;
                out[n].total_ms = c->ms;
                out[n].bytes = c->bytes;
            }
            n++;
        }
    return n < cap ? n : cap;
}

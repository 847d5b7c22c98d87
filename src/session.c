/* Sessions: the settings, the backend choice, context limits, batching of
 * long inputs and statistics (the trace configuration is in trace.c,
 * sequences and batches in batch.c). */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

void dp_session_params_default(dp_session_params *p) {
    memset(p, 0, sizeof *p);
    p->backend = DP_BACKEND_AUTO;
}

#ifdef DOPPLER_HAVE_CUDA
/* A GPU is present and DOPPLER_NO_CUDA does not hide it. */
static int gpu_usable(const dp_session *s) { return !s->set.no_cuda && dp_cuda_available(); }
#endif

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

dp_session *dp_session_new(dp_model *m, const dp_session_params *pp) {
    dp_session_params p;
    if (pp) p = *pp;
    else dp_session_params_default(&p);
    const dp_hparams *hp = &m->hp;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0 || p.n_seq_max < 0) {
        dp_set_error(DP_ERR_ARG, "context, batch, thread and sequence counts must not be negative");
        return NULL;
    }
    dp_session *s = dp_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->n_ctx = p.n_ctx ? p.n_ctx : 4096;
    if (s->n_ctx > hp->n_ctx_train) s->n_ctx = hp->n_ctx_train;
    s->n_seq_max = p.n_seq_max ? p.n_seq_max : 1;
    s->n_batch = p.n_batch ? p.n_batch : 512;
    /* a batch never holds more positions than its sequences can take */
    if ((int64_t)s->n_batch > (int64_t)s->n_ctx * s->n_seq_max) s->n_batch = s->n_ctx * s->n_seq_max;
    s->n_threads = p.n_threads ? p.n_threads : default_threads();
    s->logits_all = p.logits_all;
    if (dp_settings_read(&s->set, DP_SET_ALL)) {
        free(s);
        return NULL;
    }

    switch (p.backend) {
    case DP_BACKEND_CPU: s->be = &dp_backend_cpu; break;
    case DP_BACKEND_CUDA:
#ifdef DOPPLER_HAVE_CUDA
        if (!gpu_usable(s)) {
            dp_set_error(DP_ERR_BACKEND, "CUDA backend requested but no usable GPU was found%s",
                         s->set.no_cuda ? " (DOPPLER_NO_CUDA=1)" : "");
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
        s->be = gpu_usable(s) ? &dp_backend_cuda : &dp_backend_cpu;
#else
        s->be = &dp_backend_cpu;
#endif
    }

    s->kv_eb = s->be->kv_elem_bytes ? s->be->kv_elem_bytes : 4;
    if (p.kv_type == DP_KV_F32 || p.kv_type == DP_KV_F16) {
        const int want = p.kv_type == DP_KV_F16 ? 2 : 4;
        if (want != s->kv_eb && s->be != &dp_backend_cpu) {
            dp_set_error(DP_ERR_ARG, "the %s backend keeps K/V in %s only (kv_type %s; the cpu backend "
                                     "keeps f32 or f16)", s->be->name,
                         s->kv_eb == 2 ? "f16" : "f32", want == 2 ? "f16" : "f32");
            free(s);
            return NULL;
        }
        s->kv_eb = want;
    } else if (p.kv_type != DP_KV_DEFAULT) {
        dp_set_error(DP_ERR_ARG, "kv_type %d is not a K/V type (DP_KV_DEFAULT, DP_KV_F32, DP_KV_F16)", (int)p.kv_type);
        free(s);
        return NULL;
    }
    if (s->n_seq_max > 1 && !s->be->forward_batch) {
        dp_set_error(DP_ERR_BACKEND, "%d sequences per session (n_seq_max) need the batched path, which the %s "
                                     "backend does not have yet: use the CPU backend", s->n_seq_max, s->be->name);
        free(s);
        return NULL;
    }
    size_t rows = s->logits_all ? (size_t)s->n_batch : 1;
    s->logits = dp_malloc_aligned(rows * (size_t)hp->n_vocab * sizeof(float));
    if (!s->logits || dp_batch_init(s, p.kv_mem) != DP_OK || s->be->init(s) != 0) {
        dp_session_free(s);
        return NULL;
    }
    return s;
}

void dp_session_free(dp_session *s) {
    if (!s) return;
    dp_batch_free_logits(s); /* page-locked by the backend: before it goes */
    if (s->be && s->be_state) s->be->free(s);
    dp_batch_free(s);
    dp_free_aligned(s->logits);
    free(s->trace_layers);
    free(s->prof);
    free(s);
}

/* Counts one evaluation of n tokens that took dt seconds. */
static void count_eval(dp_session *s, int n, double dt) {
    s->stats.n_eval_calls++;
    if (n > 1) {
        s->stats.n_prefill_tokens += (uint64_t)n;
        s->stats.prefill_s += dt;
    } else {
        s->stats.n_decode_tokens++;
        s->stats.decode_s += dt;
    }
}

static int check_tokens(const dp_session *s, const int32_t *tokens, int n) {
    const int n_vocab = s->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return dp_set_error(DP_ERR_ARG, "token id %d at index %d is outside the vocabulary (0..%d)", tokens[i], i,
                                n_vocab - 1);
    return DP_OK;
}

/* One batch chunk of dp_eval: sequence 0 through the batch path. */
static int forward_chunk(dp_session *s, const int32_t *tokens, int n, int pos0, int last, void *user) {
    (void)pos0, (void)last, (void)user;
    return dp_eval_seq(s, 0, tokens, n, s->logits_all, s->logits);
}

int dp_eval(dp_session *s, const int32_t *tokens, int n) {
    if (n <= 0) return dp_set_error(DP_ERR_ARG, "dp_eval: no tokens");
    int pos = dp_seq_pos(s, 0);
    if (pos < 0) return pos;
    if (pos + n > s->n_ctx)
        return dp_set_error(DP_ERR_CTX_FULL, "context full: %d tokens in the cache + %d new exceed the context size %d",
                            pos, n, s->n_ctx);
    if (s->logits_all && n > s->n_batch)
        return dp_set_error(DP_ERR_ARG, "dp_eval: %d tokens with all logits exceed the batch size %d", n,
                            s->n_batch);
    int rc = check_tokens(s, tokens, n);
    if (rc) return rc;
    double t0 = dp_time_s();
    if ((rc = dp_eval_chunks(s, tokens, n, pos, forward_chunk, NULL))) return rc;
    s->n_logits = s->logits_all ? n : 1;
    count_eval(s, n, dp_time_s() - t0);
    return DP_OK;
}

int dp_eval_sample(dp_session *s, const int32_t *tokens, int n, dp_sampler *smp, int32_t *next) {
    if (s->be->eval_sample && !s->logits_all && n > 0 && n <= s->n_batch && dp_seq_pos(s, 0) >= 0 &&
        dp_seq_pos(s, 0) + n <= s->n_ctx) {
        int rc = check_tokens(s, tokens, n);
        if (rc) return rc;
        double t0 = dp_time_s();
        if ((rc = dp_eval_sample_seq0(s, tokens, n, smp, next))) return rc;
        s->n_logits = 0; /* the logits stayed on the device */
        count_eval(s, n, dp_time_s() - t0);
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

int dp_session_pos(const dp_session *s) { return dp_kv_alive(&s->kv, 0) ? s->kv.seqs[0].len : 0; }
int dp_session_ctx(const dp_session *s) { return s->n_ctx; }
const char *dp_session_backend(const dp_session *s) { return s->be->name; }

int dp_session_truncate(dp_session *s, int pos) {
    int rc = dp_seq_truncate(s, 0, pos);
    if (!rc) s->n_logits = 0;
    return rc;
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
    out->n_seq_max = s->n_seq_max;
    const int eb = s->kv_eb;
    snprintf(out->kv_type, sizeof out->kv_type, "%s", eb == 4 ? "f32" : eb == 2 ? "f16" : "?");
    /* K and V rows of n_head_kv * head_dim elements in every layer */
    out->kv_bytes_per_token = 2ull * (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * (uint64_t)eb;
    out->kv_bytes = out->kv_bytes_per_token * (uint64_t)s->n_ctx; /* a paged backend reports its pool */
    const unsigned scopes = DP_SET_MODEL | DP_SET_SESSION | (s->be == &dp_backend_cpu ? DP_SET_CPU : DP_SET_CUDA);
    dp_settings_describe(&s->set, scopes, out->settings, sizeof out->settings);
    return s->be->describe ? s->be->describe(s, out) : DP_OK;
}

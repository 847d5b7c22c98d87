/* Trace and profile configuration of a session, and the events the
 * backends hand over (trace.h, prof.h). Backends call into this file, so it
 * is part of doppler_core, below both. */
#include <stdlib.h>
#include <string.h>

#include "prof.h"
#include "trace.h"
#include "util.h"

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
    dp_trace_event ev = {point, layer, pos0, n_pos, dim, data, s->trace_seq};
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

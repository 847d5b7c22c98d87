/* Causal (optionally sliding-window) attention over the KV cache.
 *
 * K is cached row-major ([pos][kv_dim]); V is cached transposed
 * ([kv_dim][n_ctx]) so that both products are the tile kernel's
 * row-times-row dot products:
 *   scores = Q . K^T   (weight rows = key rows)
 *   out    = P . V     (weight rows = rows of V^T)
 *
 * Several positions (prefill): one task per (head, block of queries), the
 * scores of the block in per-thread scratch.
 * One position (decode): one task per (head, chunk of keys) computes the
 * chunk's scores, their max, the sum of exponentials and the weighted sum
 * of values; a merge rescales the chunks to the global max (the usual
 * split-softmax identity), so long contexts use every thread even with one
 * KV head. */
#include <math.h>
#include <string.h>

#include "ops.h"

void cpu_store_vt(float *vt, const float *v, int n, int pos0, int kv_dim, int n_ctx) {
    for (int c = 0; c < kv_dim; c++) {
        float *dst = vt + (size_t)c * n_ctx + pos0;
        for (int i = 0; i < n; i++) dst[i] = v[(size_t)i * kv_dim + c];
    }
}

typedef struct {
    cpu_ctx *c;
    float *out, *probs;
    const float *q, *kc, *vt;
    int n, pos0, NH, NKV, HD, window, exclude_self, n_kv, n_ctx;
    float scale, softcap;
    int n_qblocks;       /* prefill */
    int chunk, n_chunks; /* decode */
} attn_job;

/* keys query position p may see: [*lo, *hi] */
static inline void key_range(const attn_job *j, int p, int *lo, int *hi) {
    *lo = j->window && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    *hi = j->exclude_self && p > 0 ? p - 1 : p;
}

/* Prefill: head h, queries i0..i1-1 against keys lo_b..hi_b (the union of
 * their ranges). */
static void prefill_task(void *arg, int64_t t, int thread) {
    const attn_job *j = arg;
    const dp_cpu_kernels *k = j->c->k;
    const int HD = j->HD, Q = j->NH * HD, KV = j->NKV * HD, group = j->NH / j->NKV;
    /* the last query blocks have the most keys: hand them out first */
    const int qb = j->n_qblocks - 1 - (int)(t / j->NH), h = (int)(t % j->NH), g = h / group;
    const int i0 = qb * CPU_ATTN_QBLOCK, i1 = i0 + CPU_ATTN_QBLOCK < j->n ? i0 + CPU_ATTN_QBLOCK : j->n;
    int lo_b, hi_b, lo, hi;
    key_range(j, j->pos0 + i0, &lo_b, &hi);
    key_range(j, j->pos0 + i1 - 1, &lo, &hi_b);
    if (hi_b < hi) hi_b = hi;
    const int nk = hi_b - lo_b + 1;
    float *S = j->c->scores[thread];
    /* S[i][key] = q_i . k_key */
    k->gemm(j->kc + (size_t)lo_b * KV + g * HD, KV, nk, j->q + (size_t)i0 * Q + h * HD, Q, i1 - i0, HD, S, nk, 0);
    for (int i = i0; i < i1; i++) {
        float *row = S + (size_t)(i - i0) * nk;
        key_range(j, j->pos0 + i, &lo, &hi);
        int a = lo - lo_b, m = hi - lo + 1;
        float *v = row + a;
        k->scale(v, j->scale, m);
        cpu_softcap(v, m, j->softcap);
        float mx = -INFINITY;
        for (int x = 0; x < m; x++) mx = v[x] > mx ? v[x] : mx;
        double sum = k->exp_sum(v, mx, m);
        k->scale(v, (float)(1.0 / sum), m);
        /* keys outside this query's range weigh exactly zero */
        for (int x = 0; x < a; x++) row[x] = 0.0f;
        for (int x = a + m; x < nk; x++) row[x] = 0.0f;
        if (j->probs) {
            float *pr = j->probs + ((size_t)i * j->NH + h) * j->n_kv;
            memset(pr, 0, sizeof(float) * (size_t)j->n_kv);
            memcpy(pr + lo, v, sizeof(float) * (size_t)m);
        }
    }
    /* out[i][h] = sum_key S[i][key] v_key */
    k->gemm(j->vt + (size_t)g * HD * j->n_ctx + lo_b, j->n_ctx, HD, S, nk, i1 - i0, nk,
            j->out + (size_t)i0 * Q + h * HD, Q, 0);
}

/* Decode: head h, keys of chunk c. Partial results: max, sum, HD values. */
static void decode_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const attn_job *j = arg;
    const dp_cpu_kernels *k = j->c->k;
    const int HD = j->HD, KV = j->NKV * HD, group = j->NH / j->NKV;
    const int h = (int)(t / j->n_chunks), ch = (int)(t % j->n_chunks), g = h / group;
    int lo, hi;
    key_range(j, j->pos0, &lo, &hi);
    int a = lo + ch * j->chunk, b = a + j->chunk - 1 < hi ? a + j->chunk - 1 : hi;
    float *part = j->c->attn_part + ((size_t)h * j->n_chunks + ch) * (HD + 2);
    if (a > b) {
        part[0] = -INFINITY;
        part[1] = 0.0f;
        return;
    }
    const int m = b - a + 1;
    float *s = j->c->attn_s + (size_t)h * j->n_ctx + a;
    k->gemm(j->kc + (size_t)a * KV + g * HD, KV, m, j->q + (size_t)h * HD, HD, 1, HD, s, m, 0);
    k->scale(s, j->scale, m);
    cpu_softcap(s, m, j->softcap);
    float mx = -INFINITY;
    for (int x = 0; x < m; x++) mx = s[x] > mx ? s[x] : mx;
    part[0] = mx;
    part[1] = (float)k->exp_sum(s, mx, m);
    k->gemm(j->vt + (size_t)g * HD * j->n_ctx + a, j->n_ctx, HD, s, m, 1, m, part + 2, HD, 0);
}

void cpu_attention(cpu_ctx *c, float *out, const float *q, const float *kc, const float *vt, int n, int pos0, int NH,
                   int NKV, int HD, int window, float scale, float softcap, int exclude_self, float *probs) {
    attn_job j = {.c = c, .out = out, .probs = probs, .q = q, .kc = kc, .vt = vt, .n = n, .pos0 = pos0, .NH = NH,
                  .NKV = NKV, .HD = HD, .window = window, .exclude_self = exclude_self, .n_kv = pos0 + n,
                  .n_ctx = c->n_ctx, .scale = scale, .softcap = softcap};
    if (n > 1) {
        j.n_qblocks = (n + CPU_ATTN_QBLOCK - 1) / CPU_ATTN_QBLOCK;
        dp_pool_run(c->pool, prefill_task, &j, (int64_t)j.n_qblocks * NH);
        return;
    }
    int lo, hi;
    key_range(&j, pos0, &lo, &hi);
    int nk = hi - lo + 1;
    /* about four tasks per thread, at least 64 keys each */
    int chunk = (int)(((int64_t)nk * NH + 4 * c->n_threads - 1) / (4 * c->n_threads));
    if (chunk < 64) chunk = 64;
    j.chunk = chunk;
    j.n_chunks = (nk + chunk - 1) / chunk;
    if (j.n_chunks > c->attn_max_chunks) {
        j.n_chunks = c->attn_max_chunks;
        j.chunk = (nk + j.n_chunks - 1) / j.n_chunks;
    }
    dp_pool_run(c->pool, decode_task, &j, (int64_t)NH * j.n_chunks);
    /* merge the chunks of each head */
    for (int h = 0; h < NH; h++) {
        const float *part = c->attn_part + (size_t)h * j.n_chunks * (HD + 2);
        float M = -INFINITY;
        for (int ch = 0; ch < j.n_chunks; ch++) M = part[ch * (HD + 2)] > M ? part[ch * (HD + 2)] : M;
        double L = 0;
        for (int ch = 0; ch < j.n_chunks; ch++) {
            const float *pc = part + ch * (HD + 2);
            if (pc[1] > 0.0f) L += (double)pc[1] * exp((double)pc[0] - M);
        }
        float *o = out + (size_t)h * HD;
        memset(o, 0, sizeof(float) * (size_t)HD);
        for (int ch = 0; ch < j.n_chunks; ch++) {
            const float *pc = part + ch * (HD + 2);
            if (!(pc[1] > 0.0f)) continue;
            float w = (float)(exp((double)pc[0] - M) / L);
            c->k->axpy(o, w, pc + 2, HD);
            if (probs) {
                int a = lo + ch * j.chunk, b = a + j.chunk - 1 < hi ? a + j.chunk - 1 : hi;
                float *s = c->attn_s + (size_t)h * c->n_ctx;
                for (int x = a; x <= b; x++) s[x] *= w;
            }
        }
        if (probs) {
            float *pr = probs + (size_t)h * j.n_kv;
            const float *s = c->attn_s + (size_t)h * c->n_ctx;
            for (int x = 0; x < j.n_kv; x++) pr[x] = x >= lo && x <= hi ? s[x] : 0.0f;
        }
    }
}

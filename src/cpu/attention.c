/* Causal (optionally sliding-window) attention over a paged KV cache, for
 * the runs of a batch (each run: consecutive positions of one sequence,
 * attending to its own pages).
 *
 * A page holds page_size positions of K and of V, each row-major
 * ([slot][kv_dim]). Scores are the tile kernel's row-times-row products,
 * one call per page segment (weight rows = key rows); segments start at
 * page boundaries whatever the query block.
 *
 * A task serves every query head of one KV head (a GQA group).
 * Several positions (prefill): one task per (KV head, block of queries),
 * the scores of the block in per-thread scratch, one query head after
 * another; the KV head's K rows of the block's keys are copied once into
 * per-thread scratch (page_rows), where every query head's scores read
 * them in one call of the tile kernel, and its V rows a page at a time
 * beside them for out = P . V by wsum (each V row scaled into the block's
 * outputs).
 * One position (decode): one task per chunk of keys computes the chunk's
 * scores for every head in one pass over the keys' rows, their max, the sum
 * of exponentials and the weighted sum of values; a
 * merge rescales the chunks to the global max (the usual split-softmax
 * identity), so long contexts use every thread even with one KV head.
 * Chunks are whole pages; their size depends on the context and the thread
 * count only.
 * A query's result depends on its own sequence and position and on the
 * query block or chunk it is in, never on other sequences of the batch.
 *
 * An f16 cache (dp_kv_type) holds the same rows in half the bytes. Decode
 * reads them with the kernels' f16 forms (gemm_w16, wsum_x16: converted as
 * they are loaded, so a step reads half the bytes); a prefill block
 * converts the rows it copies into its scratch anyway. Either way the
 * products are the float kernels' on the values rounded to f16. */
#include <math.h>
#include <string.h>

#include "../quant.h"
#include "../util.h"
#include "ops.h"

void cpu_kv_store(void *k, void *v, int eb, int page_size, const int32_t *pages, int pos0, int n,
                  const float *krows, const float *vrows, int kv_dim) {
    const int type = eb == 2 ? DP_TYPE_F16 : DP_TYPE_F32;
    for (int i = 0; i < n; i++) {
        int p = pos0 + i;
        size_t at = ((size_t)pages[p / page_size] * page_size + p % page_size) * (size_t)kv_dim;
        dp_quantize_row(type, krows + (size_t)i * kv_dim, (uint8_t *)k + at * (size_t)eb, kv_dim);
        dp_quantize_row(type, vrows + (size_t)i * kv_dim, (uint8_t *)v + at * (size_t)eb, kv_dim);
    }
}

typedef struct {
    cpu_ctx *c;
    const cpu_attn_run *runs;
    const int64_t *task0;    /* first task of each run, n_runs + 1 entries */
    int n_runs;
    const void *k, *v;
    int eb; /* bytes of an element of k and v: 4 (float32) or 2 (f16) */
    int ps, NH, NKV, HD, window;
    float scale, softcap;
} attn_job;

/* Per run, filled before the tasks run. */
typedef struct {
    int n_qblocks;           /* prefill */
    int chunk, c0, n_chunks; /* decode: chunks of `chunk` keys from c0 (a multiple of chunk) */
    int64_t part0;           /* decode: its partial results start here (in units of HD + 2 floats) */
} run_plan;

/* keys position p of run r may see: [*lo, *hi] */
static inline void key_range(const attn_job *j, const cpu_attn_run *r, int p, int *lo, int *hi) {
    *lo = j->window && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    *hi = r->exclude_self && p > 0 ? p - 1 : p;
}

/* head g's row of K or V (base) at position pos of run r: its first element */
static inline const uint8_t *kv_at(const attn_job *j, const void *base, const cpu_attn_run *r, int pos, int g) {
    return (const uint8_t *)base + (((size_t)r->pages[pos / j->ps] * j->ps + pos % j->ps) * (size_t)(j->NKV * j->HD) +
                                    (size_t)g * j->HD) * (size_t)j->eb;
}

/* n consecutive elements from an element of the cache into buf as float */
static inline void kv_floats(const attn_job *j, const uint8_t *src, size_t n, float *buf) {
    if (j->eb == 2) j->c->k->dequant[DP_TYPE_F16](src, buf, (int64_t)n);
    else memcpy(buf, src, sizeof(float) * n);
}

/* The last key of the page segment that starts at x0, at most b */
static inline int seg_end(const attn_job *j, int x0, int b) {
    int e = (x0 / j->ps + 1) * j->ps - 1;
    return e < b ? e : b;
}

/* Head g's rows of keys x0..x1 (within one page) copied into buf, one after
 * another. In the page they lie kv_dim floats apart (4 KB on Qwen3-0.6B),
 * which puts them in few cache sets, and the products read them once per
 * query tile: copied once, they are read from consecutive lines. */
static const float *page_rows(const attn_job *j, const void *base, const cpu_attn_run *r, int g, int x0, int x1,
                              float *buf) {
    const uint8_t *src = kv_at(j, base, r, x0, g);
    const size_t KV = (size_t)(j->NKV * j->HD) * (size_t)j->eb;
    for (int x = 0; x <= x1 - x0; x++) kv_floats(j, src + (size_t)x * KV, (size_t)j->HD, buf + (size_t)x * j->HD);
    return buf;
}

/* Head g's rows of keys a..b (any pages) copied into buf, one after another */
static const float *range_rows(const attn_job *j, const void *base, const cpu_attn_run *r, int g, int a, int b,
                               float *buf) {
    for (int x0 = a; x0 <= b;) {
        const int x1 = seg_end(j, x0, b);
        page_rows(j, base, r, g, x0, x1, buf + (size_t)(x0 - a) * j->HD);
        x0 = x1 + 1;
    }
    return buf;
}

/* Prefill: run r, head h, queries i0..i1-1 against keys from the page start
 * before the union of their ranges. */
static void prefill_task(const attn_job *j, const cpu_attn_run *r, const run_plan *rp, int64_t t, int thread) {
    const dp_cpu_kernels *k = j->c->k;
    const int HD = j->HD, Q = j->NH * HD, group = j->NH / j->NKV;
    /* the last query blocks have the most keys: hand them out first */
    const int qb = rp->n_qblocks - 1 - (int)(t / j->NKV), g = (int)(t % j->NKV);
    const int i0 = qb * CPU_ATTN_QBLOCK, i1 = i0 + CPU_ATTN_QBLOCK < r->n ? i0 + CPU_ATTN_QBLOCK : r->n;
    int lo_b, hi_b, lo, hi;
    key_range(j, r, r->pos0 + i0, &lo_b, &hi);
    key_range(j, r, r->pos0 + i1 - 1, &lo, &hi_b);
    if (hi_b < hi) hi_b = hi;
    lo_b -= lo_b % CPU_ATTN_PAGE; /* the page start */
    const int nk = hi_b - lo_b + 1, n_kv = r->pos0 + r->n;
    /* the K rows of the block's keys once for the group's query heads, a page of V rows after them */
    float *S = j->c->scores[thread], *vbuf = j->c->attn_page[thread] + (size_t)nk * HD;
    const float *K = range_rows(j, j->k, r, g, lo_b, hi_b, j->c->attn_page[thread]);
    for (int h = g * group; h < (g + 1) * group; h++) {
        /* S[i][key - lo_b] = q_i . k_key */
        k->gemm(K, HD, nk, r->q + (size_t)i0 * Q + h * HD, Q, i1 - i0, HD, S, nk, 0);
        for (int i = i0; i < i1; i++) {
            float *row = S + (size_t)(i - i0) * nk;
            key_range(j, r, r->pos0 + i, &lo, &hi);
            int a = lo - lo_b, m = hi - lo + 1;
            float *v = row + a;
            k->scale(v, j->scale, m);
            cpu_softcap(v, m, j->softcap);
            const float mx = k->maxv(v, m);
            double sum = k->exp_sum(v, mx, m);
            k->scale(v, (float)(1.0 / sum), m);
            /* keys outside this query's range weigh exactly zero */
            for (int x = 0; x < a; x++) row[x] = 0.0f;
            for (int x = a + m; x < nk; x++) row[x] = 0.0f;
            if (r->probs) {
                float *pr = r->probs + ((size_t)i * j->NH + h) * n_kv;
                memset(pr, 0, sizeof(float) * (size_t)n_kv);
                memcpy(pr + lo, v, sizeof(float) * (size_t)m);
            }
        }
        /* out[i] = sum over the keys of S[i][key] v_key, a page of V rows at
         * a time (in L1 for every query of the block; at most CPU_ATTN_PAGE
         * rows, the scratch's room after K: wsum adds the rows in order, so
         * the cut does not change a bit) */
        float *o = r->out + (size_t)i0 * Q + h * HD;
        for (int i = 0; i < i1 - i0; i++) memset(o + (size_t)i * Q, 0, sizeof(float) * (size_t)HD);
        for (int x0 = lo_b; x0 <= hi_b;) {
            int x1 = seg_end(j, x0, hi_b);
            if (x1 - x0 >= CPU_ATTN_PAGE) x1 = x0 + CPU_ATTN_PAGE - 1;
            k->wsum(o, Q, i1 - i0, S + (x0 - lo_b), nk, page_rows(j, j->v, r, g, x0, x1, vbuf), HD, x1 - x0 + 1, HD);
            x0 = x1 + 1;
        }
    }
}

/* keys of chunk ch of a decode run: [*a, *b] within [lo, hi] */
static inline void chunk_keys(const run_plan *rp, int ch, int lo, int hi, int *a, int *b) {
    int c0 = rp->c0 + ch * rp->chunk;
    *a = c0 > lo ? c0 : lo;
    *b = c0 + rp->chunk - 1 < hi ? c0 + rp->chunk - 1 : hi;
}

/* Asks for the rows of keys x0..x1 (within one page: contiguous) of base.
 * A run's pages lie anywhere in the pool, so the hardware prefetcher stops
 * at each page's end; without this one position's pass over its cache is
 * bound by memory latency, not bandwidth. */
static void prefetch_seg(const attn_job *j, const void *base, const cpu_attn_run *r, int x0, int x1) {
    const char *p = (const char *)kv_at(j, base, r, x0, 0);
    const size_t n = (size_t)(x1 - x0 + 1) * (size_t)(j->NKV * j->HD) * (size_t)j->eb;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o);
}

/* Decode: run r, every head, keys of chunk ch. Partial results per head:
 * max, sum, HD values. The pass goes page by page over whole rows of K
 * (every KV head's part of a row), then of V: a contiguous stream, where a
 * pass per KV head would read a fraction of each row. */
static void decode_task(const attn_job *j, const cpu_attn_run *r, const run_plan *rp, int64_t ch, int thread) {
    const dp_cpu_kernels *k = j->c->k;
    const int HD = j->HD, NKV = j->NKV, group = j->NH / NKV, KV = NKV * HD;
    const int64_t pstride = (int64_t)rp->n_chunks * (HD + 2); /* from one head's partial results to the next's */
    int lo, hi, a, b;
    key_range(j, r, r->pos0, &lo, &hi);
    chunk_keys(rp, (int)ch, lo, hi, &a, &b);
    float *part = j->c->attn_part + (rp->part0 + ch) * (HD + 2);
    if (a > b) {
        for (int h = 0; h < j->NH; h++) part[h * pstride] = -INFINITY, part[h * pstride + 1] = 0.0f;
        return;
    }
    const int m = b - a + 1;
    /* scores s[h][key - a], every head of a KV head in one tile call per
     * page; the same page of V is asked for meanwhile */
    float *s = j->c->scores[thread];
    for (int x0 = a; x0 <= b;) {
        const int x1 = seg_end(j, x0, b);
        if (x1 < b) prefetch_seg(j, j->k, r, x1 + 1, seg_end(j, x1 + 1, b));
        prefetch_seg(j, j->v, r, x0, x1);
        const uint8_t *kr = kv_at(j, j->k, r, x0, 0);
        for (int g = 0; g < NKV; g++) {
            const float *qg = r->q + (size_t)g * group * HD;
            float *sg = s + (size_t)g * group * m + (x0 - a);
            const size_t o = (size_t)g * HD;
            if (j->eb == 2) k->gemm_w16((const uint16_t *)kr + o, KV, x1 - x0 + 1, qg, HD, group, HD, sg, m, 0);
            else k->gemm((const float *)kr + o, KV, x1 - x0 + 1, qg, HD, group, HD, sg, m, 0);
        }
        x0 = x1 + 1;
    }
    for (int h = 0; h < j->NH; h++) {
        float *sh = s + (size_t)h * m, *ph = part + h * pstride;
        k->scale(sh, j->scale, m);
        cpu_softcap(sh, m, j->softcap);
        const float mx = k->maxv(sh, m);
        ph[0] = mx;
        ph[1] = (float)k->exp_sum(sh, mx, m);
        /* the merge scales these to the softmax weights */
        if (r->probs) memcpy(r->probs + (size_t)h * (r->pos0 + 1) + a, sh, sizeof(float) * (size_t)m);
        memset(ph + 2, 0, sizeof(float) * (size_t)HD);
    }
    /* each head's weighted sum of the chunk's values, a page of V rows at a
     * time (in L1 for every head of its KV head) */
    for (int x0 = a; x0 <= b;) {
        const int x1 = seg_end(j, x0, b);
        const uint8_t *vr = kv_at(j, j->v, r, x0, 0);
        for (int g = 0; g < NKV; g++) {
            float *pg = part + g * group * pstride + 2;
            const float *wg = s + (size_t)g * group * m + (x0 - a);
            const size_t o = (size_t)g * HD;
            if (j->eb == 2) k->wsum_x16(pg, pstride, group, wg, m, (const uint16_t *)vr + o, KV, x1 - x0 + 1, HD);
            else k->wsum(pg, pstride, group, wg, m, (const float *)vr + o, KV, x1 - x0 + 1, HD);
        }
        x0 = x1 + 1;
    }
}

static void attn_task(void *arg, int64_t t, int thread) {
    const attn_job *j = arg;
    int lo = 0, hi = j->n_runs - 1;
    while (lo < hi) { /* the run whose tasks hold t */
        int mid = (lo + hi + 1) / 2;
        if (j->task0[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    const cpu_attn_run *r = &j->runs[lo];
    const run_plan *rp = (const run_plan *)j->c->attn_plan + lo;
    if (r->n > 1) prefill_task(j, r, rp, t - j->task0[lo], thread);
    else decode_task(j, r, rp, t - j->task0[lo], thread);
}

/* Combines the chunks of each head of decode run r into its output. */
static void merge(const attn_job *j, const cpu_attn_run *r, const run_plan *rp) {
    const int HD = j->HD;
    int lo, hi;
    key_range(j, r, r->pos0, &lo, &hi);
    const int n_kv = r->pos0 + 1;
    for (int h = 0; h < j->NH; h++) {
        const float *part = j->c->attn_part + (rp->part0 + (int64_t)h * rp->n_chunks) * (HD + 2);
        float M = -INFINITY;
        for (int ch = 0; ch < rp->n_chunks; ch++) M = part[ch * (HD + 2)] > M ? part[ch * (HD + 2)] : M;
        double L = 0;
        for (int ch = 0; ch < rp->n_chunks; ch++) {
            const float *pc = part + ch * (HD + 2);
            if (pc[1] > 0.0f) L += (double)pc[1] * exp((double)pc[0] - M);
        }
        float *o = r->out + (size_t)h * HD;
        memset(o, 0, sizeof(float) * (size_t)HD);
        float *pr = r->probs ? r->probs + (size_t)h * n_kv : NULL;
        for (int ch = 0; ch < rp->n_chunks; ch++) {
            const float *pc = part + ch * (HD + 2);
            int a, b;
            chunk_keys(rp, ch, lo, hi, &a, &b);
            if (!(pc[1] > 0.0f)) {
                for (int x = a; pr && x <= b; x++) pr[x] = 0.0f;
                continue;
            }
            float w = (float)(exp((double)pc[0] - M) / L);
            j->c->k->axpy(o, w, pc + 2, HD);
            for (int x = a; pr && x <= b; x++) pr[x] *= w;
        }
        if (pr) {
            for (int x = 0; x < lo; x++) pr[x] = 0.0f;
            for (int x = hi + 1; x < n_kv; x++) pr[x] = 0.0f;
        }
    }
}

/* Scratch for n_runs runs and n_part partial results. */
static int reserve(cpu_ctx *c, int n_runs, int64_t n_part) {
    if (n_runs > c->attn_runs_cap) {
        dp_free_aligned(c->attn_plan);
        dp_free_aligned(c->attn_task0);
        c->attn_plan = dp_malloc_aligned(sizeof(run_plan) * (size_t)n_runs);
        c->attn_task0 = dp_malloc_aligned(sizeof(int64_t) * (size_t)(n_runs + 1));
        c->attn_runs_cap = c->attn_plan && c->attn_task0 ? n_runs : 0;
        if (!c->attn_runs_cap) return DP_ERR_NOMEM;
    }
    if (n_part > c->attn_part_cap) {
        dp_free_aligned(c->attn_part);
        c->attn_part = dp_malloc_aligned(sizeof(float) * (size_t)n_part * (size_t)(c->head_dim + 2));
        c->attn_part_cap = c->attn_part ? n_part : 0;
        if (!c->attn_part) return DP_ERR_NOMEM;
    }
    return DP_OK;
}

int cpu_attention_runs(cpu_ctx *c, const cpu_attn_run *runs, int n_runs, const void *k, const void *v, int eb,
                       int page_size, int NH, int NKV, int HD, int window, float scale, float softcap) {
    attn_job j = {.c = c, .runs = runs, .n_runs = n_runs, .k = k, .v = v, .eb = eb, .ps = page_size, .NH = NH,
                  .NKV = NKV, .HD = HD, .window = window, .scale = scale, .softcap = softcap};
    if (reserve(c, n_runs, 0)) return DP_ERR_NOMEM;
    run_plan *plan = c->attn_plan;
    int64_t *task0 = c->attn_task0, tasks = 0, parts = 0;
    for (int i = 0; i < n_runs; i++) {
        const cpu_attn_run *r = &runs[i];
        run_plan *rp = &plan[i];
        task0[i] = tasks;
        if (r->n > 1) {
            rp->n_qblocks = (r->n + CPU_ATTN_QBLOCK - 1) / CPU_ATTN_QBLOCK;
            tasks += (int64_t)rp->n_qblocks * NKV;
            continue;
        }
        int lo, hi;
        key_range(&j, r, r->pos0, &lo, &hi);
        int nk = hi - lo + 1;
        /* about two tasks per thread, at least 64 keys each, whole 16-key
         * blocks (whole pages of the CPU backend's size) */
        int chunk = (int)(((int64_t)nk + 2 * c->n_threads - 1) / (2 * c->n_threads));
        if (chunk < 64) chunk = 64;
        chunk = (chunk + 15) / 16 * 16;
        while (hi / chunk - lo / chunk + 1 > c->attn_max_chunks) chunk += 16;
        rp->chunk = chunk;
        rp->c0 = lo / chunk * chunk;
        rp->n_chunks = hi / chunk - lo / chunk + 1;
        rp->part0 = parts;
        parts += (int64_t)NH * rp->n_chunks;
        tasks += rp->n_chunks;
    }
    task0[n_runs] = tasks;
    if (reserve(c, n_runs, parts)) return DP_ERR_NOMEM;
    j.task0 = task0;
    dp_pool_run(c->pool, attn_task, &j, tasks);
    for (int i = 0; i < n_runs; i++)
        if (runs[i].n == 1) merge(&j, &runs[i], &plan[i]);
    return DP_OK;
}

void cpu_store_vt(float *vt, const float *v, int n, int pos0, int kv_dim, int n_ctx) {
    for (int c = 0; c < kv_dim; c++) {
        float *dst = vt + (size_t)c * n_ctx + pos0;
        for (int i = 0; i < n; i++) dst[i] = v[(size_t)i * kv_dim + c];
    }
}

/* The contiguous cache is one page of c->n_ctx positions; its V is turned
 * back into rows first (a reference path: clarity over speed). */
void cpu_attention(cpu_ctx *c, float *out, const float *q, const float *kc, const float *vt, int n, int pos0, int NH,
                   int NKV, int HD, int window, float scale, float softcap, int exclude_self, float *probs) {
    const int KV = NKV * HD, n_kv = pos0 + n;
    float *v = dp_malloc_aligned(sizeof(float) * (size_t)n_kv * KV);
    if (!v) return;
    for (int x = 0; x < n_kv; x++)
        for (int d = 0; d < KV; d++) v[(size_t)x * KV + d] = vt[(size_t)d * c->n_ctx + x];
    static const int32_t page0 = 0;
    cpu_attn_run r = {.pos0 = pos0, .n = n, .pages = &page0, .q = q, .out = out, .probs = probs,
                      .exclude_self = exclude_self};
    cpu_attention_runs(c, &r, 1, kc, v, 4, c->n_ctx, NH, NKV, HD, window, scale, softcap);
    dp_free_aligned(v);
}

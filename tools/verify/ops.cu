/* doppler verify's per-op checks of the CUDA kernels against the CPU on fresh
 * random inputs (a new seed per run unless given): the tables of cases and
 * the runner. The checks themselves are in check_*.cu, the measurements of
 * --speed in speed.cu.
 *
 *  - dequantisation of every format: bit-identical to dp_dequantize_row;
 *  - matrix-vector products (plain, with the fused RMSNorm and bias, the
 *    residual add, gate/up with both activations, several matrices in one
 *    launch, the fused argmax) and the prefill GEMM: relative L2 distance to
 *    a float64 reference on the same weights <= 1e-3;
 *  - attention (prefill; decode by k_attention and by the sliced kernels,
 *    with and without the q/k norm, RoPE and K/V store fused in; sliding
 *    windows, GQA shapes) and its softmax weights against cpu_attention on
 *    the same f16-rounded cache: rel-L2 <= 1e-3;
 *  - RMSNorm, q/k norm + RoPE in both styles, the gated activations:
 *    rel-L2 <= 1e-5 against src/cpu/ops.c;
 *  - the argmax with ties against the CPU's first maximum; the device
 *    sampler against the host sampler. */
#include <stdarg.h>

#include "verify.cuh"

extern "C" {
#include "verify/ops.h"
}

/* --------------------------------------------------------------- cases */

namespace {

/* every format, at four shapes: 24 units per row (groups of 6 rows),
 * Gemma's width (32-weight blocks only), one row per group, Qwen3's width
 * (40 or 80 units a row: k_matvec_l's lanes per row) */
const int k_types[] = {DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0,
                       DP_TYPE_Q2_K, DP_TYPE_Q3_K, DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K,
                       DP_TYPE_F16,  DP_TYPE_BF16, DP_TYPE_F32,  DP_TYPE_IQ4_NL, DP_TYPE_IQ4_XS,
                       DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS, DP_TYPE_IQ2_S, DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_S};
const struct {
    int rows, cols;
} k_shapes[] = {{.rows = 301, .cols = 768}, {.rows = 77, .cols = 1152}, {.rows = 40, .cols = 4096}, {.rows = 301, .cols = 2560}};
/* an LM head's row count: k_matvec_w picks rows per group by how well they fill the lanes */
const MatvecCase k_lm_heads[] = {{.type = DP_TYPE_Q8_0, .rows = 70001, .cols = 1152},
                                 {.type = DP_TYPE_Q6_K, .rows = 70001, .cols = 512}};
/* three formats in one launch: any (W_ANY), the Q4_K_M mix (W_KM), the IQ4_XS mix (W_IX), the Q3_K_M
 * and Q2_K mixes' Q/K/V (W_ANY), the IQ3_M, IQ2_XXS and IQ3_XS mixes' and the IQ3_XXS mix's where fewer
 * than four query heads share a KV head (W_IQM), an IQ format beside Q6_K (the float matvec) */
const int k_multi[][3] = {{DP_TYPE_Q4_K, DP_TYPE_Q6_K, DP_TYPE_Q8_0},
                          {DP_TYPE_Q4_K, DP_TYPE_Q4_K, DP_TYPE_Q6_K},
                          {DP_TYPE_IQ4_XS, DP_TYPE_IQ4_XS, DP_TYPE_Q5_K},
                          {DP_TYPE_Q3_K, DP_TYPE_Q3_K, DP_TYPE_Q5_K},
                          {DP_TYPE_Q2_K, DP_TYPE_Q2_K, DP_TYPE_Q3_K},
                          {DP_TYPE_IQ3_S, DP_TYPE_IQ3_S, DP_TYPE_Q4_K},
                          {DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XXS, DP_TYPE_Q2_K},
                          {DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_XXS, DP_TYPE_Q4_K},
                          {DP_TYPE_IQ2_S, DP_TYPE_IQ2_S, DP_TYPE_IQ3_S},
                          {DP_TYPE_IQ2_XS, DP_TYPE_IQ3_S, DP_TYPE_Q6_K}};

/* the formats of k_mmv (batched decode products) */
const int k_mmv_types[] = {DP_TYPE_Q4_0,    DP_TYPE_Q4_1,   DP_TYPE_Q5_0,  DP_TYPE_Q5_1,    DP_TYPE_Q8_0,
                           DP_TYPE_Q4_K,    DP_TYPE_Q5_K,   DP_TYPE_Q6_K,  DP_TYPE_IQ4_NL,  DP_TYPE_IQ4_XS,
                           DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS, DP_TYPE_IQ2_S, DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_S,
                           DP_TYPE_Q3_K,    DP_TYPE_Q2_K};

const int ALL = RUN_SPLIT | RUN_GQA | RUN_GQA_LAST;
/* Attention: shapes of Gemma 3 (4/1 x 256), Qwen2.5-3B (16/2 x 128),
 * Qwen2.5-0.5B (14/2 x 64) and others; k_attention for decode (one split,
 * many, windows, the fault mask) and prefill; the sliced kernels with one
 * slice (several tiles), several, more slices than keys, long slices
 * (several shared-memory stages of k_attn_gqa), 7 and 8 heads per KV head. */
const AttnCase k_attn[] = {
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 0},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 37},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 4095},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 3000, .splits = 64, .min_keys = 1},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 2000, .window = 512, .min_keys = 16},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 100, .min_keys = 8, .exclude_self = 1},
    {.heads = 14, .kv_heads = 2, .head_dim = 64, .pos0 = 777, .min_keys = 32},
    {.heads = 4, .kv_heads = 2, .head_dim = 32, .pos0 = 500, .min_keys = 16},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .n = 37, .pos0 = 10, .window = 16, .splits = 8, .min_keys = 4},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .n = 64, .pos0 = 0, .splits = 8},
    /* prompts for k_attn_mma: Qwen3's heads, partial row blocks, a prompt
     * after earlier positions; 64-dim heads with a window and soft-capping
     * (7 heads per KV head); one head per KV head (4 row blocks a CTA) */
    {.heads = 32, .kv_heads = 8, .head_dim = 128, .n = 300, .pos0 = 0, .splits = 8},
    {.heads = 32, .kv_heads = 8, .head_dim = 128, .n = 77, .pos0 = 1000, .splits = 8},
    {.heads = 14, .kv_heads = 2, .head_dim = 64, .n = 150, .pos0 = 21, .window = 40, .splits = 8, .softcap = 1.5f},
    {.heads = 6, .kv_heads = 6, .head_dim = 128, .n = 90, .pos0 = 5, .splits = 8},
    {.heads = 4, .kv_heads = 2, .head_dim = 8, .n = 9, .pos0 = 3, .splits = 8, .min_keys = 2},
    /* sliced, one slice */
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 100, .splits = 1, .slices = 1, .runs = RUN_SPLIT},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 255, .window = 64, .splits = 1, .exclude_self = 1,
     .slices = 1, .runs = RUN_SPLIT},
    {.heads = 8, .kv_heads = 8, .head_dim = 64, .pos0 = 600, .splits = 4, .slices = 4, .runs = RUN_SPLIT},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 10, .splits = 1, .slices = 1, .rope = 1, .neox = 1,
     .n_rot = 128, .runs = RUN_SPLIT},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 200, .splits = 1, .slices = 1, .rope = 1, .qk_norm = 1,
     .neox = 1, .n_rot = 256, .runs = RUN_SPLIT},
    {.heads = 8, .kv_heads = 2, .head_dim = 64, .pos0 = 0, .splits = 1, .slices = 1, .rope = 1, .n_rot = 64,
     .runs = RUN_SPLIT},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 700, .splits = 1, .slices = 1, .rope = 1, .neox = 1,
     .n_rot = 128, .runs = RUN_SPLIT},
    /* sliced, several slices, by every kernel */
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 4095, .splits = 16, .slices = 16, .runs = ALL},
    {.heads = 4, .kv_heads = 2, .head_dim = 64, .pos0 = 5, .splits = 16, .exclude_self = 1, .slices = 16, .runs = ALL},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 255, .window = 100, .splits = 2, .slices = 2, .rope = 1,
     .qk_norm = 1, .n_rot = 128, .runs = ALL},
    {.heads = 14, .kv_heads = 2, .head_dim = 64, .pos0 = 3, .splits = 4, .slices = 4, .rope = 1, .neox = 1,
     .n_rot = 64, .runs = ALL},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 1000, .window = 512, .splits = 4, .slices = 4, .rope = 1,
     .qk_norm = 1, .neox = 1, .n_rot = 256, .runs = ALL},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 4095, .splits = 16, .slices = 16, .rope = 1, .neox = 1,
     .n_rot = 128, .runs = ALL},
    {.heads = 8, .kv_heads = 2, .head_dim = 64, .pos0 = 2047, .splits = 8, .slices = 8, .rope = 1, .n_rot = 64,
     .runs = ALL},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 8191, .splits = 16, .slices = 16,
     .runs = RUN_GQA | RUN_GQA_LAST},
    /* k_attn_gqa: long slices, windows, 8 heads per KV head, several tiles per slice */
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 6000, .splits = 16, .slices = 16, .runs = RUN_GQA},
    {.heads = 14, .kv_heads = 2, .head_dim = 64, .pos0 = 5000, .splits = 16, .slices = 16, .runs = RUN_GQA},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 3000, .window = 1024, .splits = 8, .exclude_self = 1,
     .slices = 8, .runs = RUN_GQA},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 8191, .splits = 16, .slices = 16, .rope = 1, .neox = 1,
     .n_rot = 128, .runs = RUN_GQA},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 5000, .splits = 16, .slices = 16, .rope = 1, .qk_norm = 1,
     .neox = 1, .n_rot = 256, .runs = RUN_GQA},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 4000, .window = 512, .splits = 16, .slices = 16, .rope = 1,
     .qk_norm = 1, .neox = 1, .n_rot = 256, .runs = RUN_GQA},
    {.heads = 14, .kv_heads = 2, .head_dim = 64, .pos0 = 700, .splits = 2, .slices = 2, .rope = 1, .neox = 1,
     .n_rot = 64, .runs = RUN_GQA},
    {.heads = 32, .kv_heads = 8, .head_dim = 64, .pos0 = 1500, .splits = 4, .slices = 4, .rope = 1, .n_rot = 64,
     .runs = RUN_GQA},
    {.heads = 8, .kv_heads = 2, .head_dim = 128, .pos0 = 20, .splits = 64, .slices = 32, .runs = RUN_GQA},
    {.heads = 16, .kv_heads = 2, .head_dim = 128, .pos0 = 8191, .splits = 16, .slices = 2, .runs = RUN_GQA},
    {.heads = 4, .kv_heads = 1, .head_dim = 256, .pos0 = 3000, .splits = 16, .slices = 2, .rope = 1, .qk_norm = 1,
     .neox = 1, .n_rot = 256, .runs = RUN_GQA},
    /* the newer families: Gemma 2's soft-capped scores (a small cap, so that
     * it bites on random data) by every kernel and in the softmax weights;
     * SmolLM3's NoPE layers (n_rot 0) and Phi's LongRoPE factor and partial
     * rotary in the fused decode */
    {.heads = 8, .kv_heads = 4, .head_dim = 256, .pos0 = 900, .window = 512, .min_keys = 16, .softcap = 1.5f},
    {.heads = 8, .kv_heads = 4, .head_dim = 256, .n = 33, .pos0 = 40, .window = 24, .splits = 8, .min_keys = 4,
     .softcap = 1.5f},
    {.heads = 8, .kv_heads = 4, .head_dim = 256, .pos0 = 2000, .splits = 8, .slices = 8, .rope = 1, .neox = 1,
     .n_rot = 256, .runs = ALL, .softcap = 1.5f},
    {.heads = 16, .kv_heads = 8, .head_dim = 128, .pos0 = 300, .splits = 1, .slices = 1, .rope = 1, .qk_norm = 1,
     .neox = 1, .n_rot = 128, .runs = RUN_SPLIT, .softcap = 1.5f},
    {.heads = 16, .kv_heads = 4, .head_dim = 128, .pos0 = 800, .splits = 4, .slices = 4, .rope = 1, .n_rot = 0,
     .runs = ALL},
    {.heads = 24, .kv_heads = 8, .head_dim = 128, .pos0 = 5000, .splits = 16, .slices = 16, .rope = 1, .neox = 1,
     .n_rot = 96, .runs = ALL, .rope_ms = 1.1902f},
};

void run_checks(Ctx *c) {
    for (int t : k_types)
        for (const auto &s : k_shapes)
            if (s.cols != 1152 || dp_type_get(t)->block_size == 32) check_matvec(c, {.type = t, .rows = s.rows, .cols = s.cols});
    for (const MatvecCase &k : k_lm_heads) check_matvec(c, k);
    const int saved = dp_cu_set.mvw_lanes; /* auto, then k_matvec_l's shapes 4, 4x2, 32x2 */
    for (int shape : {DP_MVW_AUTO, DP_MVW_4, DP_MVW_4X2, DP_MVW_32X2}) {
        dp_cu_set.mvw_lanes = shape;
        for (const int *types : k_multi)
            for (int cols : {768, 2560}) check_multi(c, types, cols, NULL);
    }
    dp_cu_set.mvw_lanes = saved;
    /* auto at Qwen3-4B's and -8B's widths (rows of 40 and 64 units): CTAs
     * of several groups, gate/up, bias and residual adds, and a launch of
     * three matrices of one format (a Q/K/V projection without the Q4_K_M
     * mix's Q6_K) */
    for (int t : {DP_TYPE_Q4_K, DP_TYPE_IQ4_XS, DP_TYPE_Q6_K, DP_TYPE_Q8_0, DP_TYPE_Q3_K, DP_TYPE_Q2_K, DP_TYPE_IQ3_S,
                  DP_TYPE_IQ2_XS}) {
        check_matvec(c, {.type = t, .rows = 3001, .cols = 2560});
        check_matvec(c, {.type = t, .rows = 2050, .cols = 4096});
        const int same[3] = {t, t, t}, rows[3] = {2000, 501, 499};
        check_multi(c, same, 2560, rows);
    }
    check_huge_refused(c);
    check_small_ops(c);
    check_sampler(c, 262144);
    check_sampler(c, 3000);
    for (const AttnCase &k : k_attn) {
        if (!k.slices) check_attention(c, k, 0);
        for (int run = RUN_SPLIT; run <= RUN_GQA_LAST; run <<= 1)
            if (k.runs & run) check_attention(c, k, run);
    }
    check_attention_seqs(c);
    /* batched decode: every format k_mmv takes, a row count in each of its
     * kernels (8, 16, 32, 64 columns), partial row tiles and k-blocks, LM
     * heads with the argmax */
    for (int t : k_mmv_types) {
        const int fam_a = dp_type_get(t)->block_size == 32;
        for (int nb : {2, 13, 37, 64}) check_mmv(c, t, 300, 768, nb);
        check_mmv(c, t, 77, fam_a ? 1184 : 1280, 16);
    }
    check_mmv_jobs(c, DP_TYPE_Q4_K, 16, 0);
    check_mmv_jobs(c, DP_TYPE_Q5_0, 64, 0);
    check_mmv_jobs(c, DP_TYPE_Q6_K, 13, 1);
    check_mmv_gateup(c, DP_TYPE_Q4_K, 300, 1024, 16, DP_ACT_SILU);
    check_mmv_gateup(c, DP_TYPE_Q5_K, 200, 768, 3, DP_ACT_SILU);
    check_mmv_gateup(c, DP_TYPE_Q6_K, 200, 768, 5, DP_ACT_GELU_TANH);
    check_mmv_gateup(c, DP_TYPE_Q8_0, 130, 512, 64, DP_ACT_SILU);
    check_mmv(c, DP_TYPE_Q8_0, 70001, 1152, 64);
    check_mmv(c, DP_TYPE_Q6_K, 70001, 512, 5);
    check_copy_page(c);
}

} // namespace

/* ------------------------------------------------------------- helpers */

void report(Ctx *c, int ok, const char *what, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->checks++;
    if (!ok) c->fails++;
    fprintf(c->out, "%s %-44s %s\n", ok ? "PASS" : "FAIL", what, msg);
    fflush(c->out);
}

static uint16_t rand_scale(Rng &r, float lo, float hi, int allow_neg) {
    float f = lo + (hi - lo) * (float)r.unit();
    if (allow_neg && (r.next() & 1)) f = -f;
    return dp_f32_to_fp16(f);
}

uint8_t *random_matrix(Rng &r, int type, int rows, int cols) {
    const dp_type_traits *t = dp_type_get(type);
    const size_t rb = dp_row_size(type, cols), nb = (size_t)rows * (cols / t->block_size);
    uint8_t *p = halloc<uint8_t>((size_t)rows * rb);
    if (type == DP_TYPE_F32) {
        float *f = (float *)p;
        for (size_t i = 0; i < (size_t)rows * cols; i++) f[i] = r.normal();
        return p;
    }
    if (type == DP_TYPE_F16 || type == DP_TYPE_BF16) {
        uint16_t *h = (uint16_t *)p;
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            h[i] = type == DP_TYPE_F16 ? dp_f32_to_fp16(r.normal()) : dp_f32_to_bf16(r.normal());
        return p;
    }
    for (size_t i = 0; i < (size_t)rows * rb; i++) p[i] = (uint8_t)r.next();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * t->type_size;
        uint16_t d = rand_scale(r, 0.002f, 0.02f, 1), m = rand_scale(r, 0.002f, 0.02f, 1);
        switch (type) {
        case DP_TYPE_Q4_0: case DP_TYPE_Q5_0: case DP_TYPE_Q8_0: case DP_TYPE_IQ4_NL: case DP_TYPE_IQ4_XS:
        case DP_TYPE_IQ2_XXS: case DP_TYPE_IQ2_XS: case DP_TYPE_IQ2_S: case DP_TYPE_IQ3_XXS: case DP_TYPE_IQ3_S:
            memcpy(blk, &d, 2);
            break;
        case DP_TYPE_Q4_1: case DP_TYPE_Q5_1: case DP_TYPE_Q4_K: case DP_TYPE_Q5_K:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            break;
        case DP_TYPE_Q2_K: memcpy(blk + 80, &d, 2); memcpy(blk + 82, &m, 2); break;
        case DP_TYPE_Q3_K: memcpy(blk + 108, &d, 2); break;
        case DP_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        }
    }
    return p;
}

int make_mat(Ctx *c, Mat *m, int type, int rows, int cols) {
    m->type = type, m->rows = rows, m->cols = cols;
    m->host = random_matrix(c->rng, type, rows, cols);
    m->deq = halloc<float>((size_t)rows * cols);
    const size_t rb = dp_row_size(type, cols);
    for (int r = 0; r < rows; r++) dp_dequantize_row(type, m->host + r * rb, m->deq + (size_t)r * cols, cols);
    return dp_cu_upload_matrix(m->host, type, rows, cols, &m->dev, &m->alloc);
}

void free_mat(Mat *m) {
    free(m->host);
    free(m->deq);
    if (m->alloc) cudaFree(m->alloc);
}

void ref_matvec(const Mat *m, const float *x, float *y) {
    for (int r = 0; r < m->rows; r++) {
        double s = 0;
        const float *w = m->deq + (size_t)r * m->cols;
        for (int k = 0; k < m->cols; k++) s += (double)w[k] * x[k];
        y[r] = (float)s;
    }
}

void make_pages(Ctx *c, Pages *P, int n_seq, const int *lens, int shift) {
    const int ps = 1 << shift;
    P->shift = shift, P->n_seq = n_seq, P->stride = 0, P->n_pages = 0;
    for (int i = 0; i < n_seq; i++) {
        const int np = (lens[i] + ps - 1) / ps + 1;
        P->stride = np > P->stride ? np : P->stride;
        P->n_pages += np;
    }
    int *perm = halloc<int>(P->n_pages);
    for (int i = 0; i < P->n_pages; i++) perm[i] = i;
    for (int i = P->n_pages - 1; i > 0; i--) {
        const int j = (int)(c->rng.next() % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    P->h_pt = halloc<int>((size_t)n_seq * P->stride);
    for (int i = 0, k = 0; i < n_seq; i++)
        for (int j = 0; j < P->stride; j++)
            P->h_pt[i * P->stride + j] = j < (lens[i] + ps - 1) / ps + 1 ? perm[k++] : -1;
    P->d_pt = dalloc<int>((size_t)n_seq * P->stride);
    upload(P->d_pt, P->h_pt, (size_t)n_seq * P->stride);
    P->d_rows = NULL;
    free(perm);
}

void set_rows(Pages *P, int n, const int *pos, const int *seq) {
    int *r = halloc<int>((size_t)ROW_INTS * n);
    for (int i = 0; i < n; i++) r[ROW_INTS * i + ROW_TOK] = 0, r[ROW_INTS * i + ROW_POS] = pos[i], r[ROW_INTS * i + ROW_SEQ] = seq[i];
    if (P->d_rows) cudaFree(P->d_rows);
    P->d_rows = dalloc<int>((size_t)ROW_INTS * n);
    upload(P->d_rows, r, (size_t)ROW_INTS * n);
    free(r);
}

void free_pages(Pages *P) {
    cudaFree(P->d_pt);
    if (P->d_rows) cudaFree(P->d_rows);
    free(P->h_pt);
}

void scatter_cache(const Pages &P, int seq, const uint16_t *h, int n_kv, int kv_dim, uint16_t *pool) {
    for (int p = 0; p < n_kv; p++) memcpy(pool + P.row(seq, p) * kv_dim, h + (size_t)p * kv_dim, 2 * (size_t)kv_dim);
}

/* ---------------------------------------------------------------- entry */

extern "C" int verify_ops(FILE *out, uint64_t seed, int flags) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return dp_set_error(DP_ERR_BACKEND, "no usable GPU was found");
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    fprintf(out, "device: %s, %d SMs, %.0f GiB, compute capability %d.%d; seed %llu\n", prop.name,
            prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor,
            (unsigned long long)seed);
    /* the kernels' tuning as a session would have it */
    if (dp_settings_read(&dp_cu_set, DP_SET_CUDA)) return DP_ERR_ARG;
    dp_cu_pdl = dp_cu_set.cuda_pdl;
    Ctx c;
    memset(&c, 0, sizeof c);
    c.out = out;
    c.rng.s = seed ? seed : 0x9E3779B97F4A7C15ull;
    cudaStreamCreate(&c.st);
    if (cpu_ctx_init(&c.cpu, 4, 16384, 8192, 64, 256, NULL) != DP_OK) {
        fprintf(out, "FAIL CPU reference init: %s\n", dp_last_error());
        return 1;
    }
    if (dp_cu_matvec_init(dp_cu_matvec_smem(16384))) {
        fprintf(out, "FAIL matvec init: %s\n", dp_last_error());
        return 1;
    }
    if (!(flags & VERIFY_NO_CHECKS)) run_checks(&c);
    if (flags & VERIFY_SPEED) measure_speed(&c);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) report(&c, 0, "device errors", "%s", cudaGetErrorString(e));
    fprintf(out, "%d of %d checks passed\n", c.checks - c.fails, c.checks);
    cudaStreamDestroy(c.st);
    cpu_ctx_free(&c.cpu);
    return c.fails;
}

/* verify: attention over the f16 KV cache against cpu_attention on the
 * same cache. k_attention (prefill; decode of head dimensions the sliced
 * kernels do not take) with its softmax weights for tracing; the sliced
 * decode kernels k_attn_split and k_attn_gqa (both ways of combining), with
 * and without the q/k norm, RoPE and K/V store fused in, against the CPU
 * doing those first. */
#include "verify.cuh"

namespace {

const char *kernel_name(const AttnCase &k, int run) {
    if (!k.slices) return "k_attention";
    if (run == RUN_SPLIT) return "k_attn_split";
    return run == RUN_GQA ? "k_attn_gqa" : "k_attn_gqa, last slice combines";
}

/* A cache of n_kv rows of random f16 values, and the same as floats. */
void random_cache(Ctx *c, size_t n, uint16_t *h, float *f) {
    for (size_t i = 0; i < n; i++) h[i] = dp_f32_to_fp16(c->rng.normal()), f[i] = dp_fp16_to_f32(h[i]);
}

/* cpu_attention on the float copy of the cache (it keeps V transposed,
 * [kv_dim][n_ctx of its context]). */
void cpu_reference(Ctx *c, const AttnCase &k, const float *q, const float *kf, const float *vf, float *out,
                   float *probs) {
    const int KV = k.kv_heads * k.head_dim, n_kv = k.pos0 + k.n;
    float *vt = halloc<float>((size_t)KV * c->cpu.n_ctx);
    cpu_store_vt(vt, vf, n_kv, 0, KV, c->cpu.n_ctx);
    cpu_attention(&c->cpu, out, q, kf, vt, k.n, k.pos0, k.heads, k.kv_heads, k.head_dim, k.window,
                  1.0f / sqrtf((float)k.head_dim), k.exclude_self, probs);
    free(vt);
}

void describe(const AttnCase &k, int run, char *what, size_t cap) {
    int n = snprintf(what, cap, "attention%s h%d/%d d%d n%d pos%d w%d", k.rope ? "+rope" : "", k.heads, k.kv_heads,
                     k.head_dim, k.n, k.pos0, k.window);
    if (k.rope) n += snprintf(what + n, cap - n, "%s %s rot%d", k.qk_norm ? " qk-norm" : "", k.neox ? "neox" : "adjacent",
                              k.n_rot);
    if (k.slices) snprintf(what + n, cap - n, "%s %s %d slices", k.exclude_self ? " excl" : "", kernel_name(k, run), k.slices);
    else snprintf(what + n, cap - n, "%s s%d/%d", k.exclude_self ? " excl" : "", k.splits, k.min_keys);
}

/* q already rotated; twice (the second run checks that the combine
 * counters were reset), then the softmax weights. */
void attention_plain(Ctx *c, const AttnCase &k, int run, AttnLaunch A, const char *what) {
    const int n = k.n, Q = k.heads * k.head_dim, KV = k.kv_heads * k.head_dim, n_kv = k.pos0 + n;
    const size_t cache = (size_t)n_kv * KV, nq = (size_t)n * Q, np = (size_t)n * k.heads * n_kv;
    float *q = halloc<float>(nq), *kf = halloc<float>(cache), *vf = halloc<float>(cache);
    uint16_t *kh = halloc<uint16_t>(cache), *vh = halloc<uint16_t>(cache);
    for (size_t i = 0; i < nq; i++) q[i] = c->rng.normal();
    random_cache(c, cache, kh, kf);
    random_cache(c, cache, vh, vf);
    float *ref = halloc<float>(nq), *probs = halloc<float>(np), *h = halloc<float>(nq), *hp = halloc<float>(np);
    cpu_reference(c, k, q, kf, vf, ref, probs);
    float *dq = dalloc<float>(nq), *dout = dalloc<float>(nq), *dprobs = dalloc<float>(np);
    __half *dk = dalloc<__half>(cache), *dv = dalloc<__half>(cache);
    upload(dq, q, nq);
    cudaMemcpy(dk, kh, 2 * cache, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, vh, 2 * cache, cudaMemcpyHostToDevice);
    A.q = dq, A.out = dout, A.k = dk, A.v = dv;
    double e = 0;
    for (int rep = 0; rep < 2; rep++) {
        cudaMemset(dout, 0xFF, sizeof(float) * nq);
        const int rc = dp_cu_attention(&A, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dout, nq);
        const double er = rc ? INFINITY : dp_rel_l2(h, ref, nq);
        if (!(er <= e)) e = er;
    }
    report(c, e <= TOL, what, "rel-L2 %.2e (limit %.0e)", e, TOL);
    if (run != RUN_GQA_LAST) { /* the softmax weights do not depend on the kernel */
        const int rc = dp_cu_attention_probs(&A, dprobs, n_kv, c->st);
        cudaStreamSynchronize(c->st);
        download(hp, dprobs, np);
        e = rc ? INFINITY : dp_rel_l2(hp, probs, np);
        char w2[128];
        snprintf(w2, sizeof w2, "attention probs h%d/%d d%d n%d pos%d w%d", k.heads, k.kv_heads, k.head_dim, n, k.pos0,
                 k.window);
        if (k.slices && run != RUN_SPLIT) snprintf(w2 + strlen(w2), sizeof w2 - strlen(w2), " (%s)", kernel_name(k, run));
        report(c, e <= TOL, w2, "rel-L2 %.2e", e);
    }
    cudaFree(dq), cudaFree(dout), cudaFree(dk), cudaFree(dv), cudaFree(dprobs);
    free(q), free(kf), free(vf), free(kh), free(vh), free(ref), free(probs), free(h), free(hp);
}

/* Decode with the q/k norm, RoPE and the K/V store fused in, against the
 * CPU doing them first (cpu_rmsnorm, cpu_rope, f16 cache); also the cache
 * row the kernel stored. */
void attention_rope(Ctx *c, const AttnCase &k, AttnLaunch A, const char *what) {
    const int NH = k.heads, NKV = k.kv_heads, HD = k.head_dim, pos0 = k.pos0, n_rot = k.n_rot;
    const int Q = NH * HD, KV = NKV * HD, n_kv = pos0 + 1;
    const size_t cache = (size_t)n_kv * KV;
    float *q = halloc<float>(Q), *kv = halloc<float>(KV), *v = halloc<float>(KV), *qw = halloc<float>(HD),
          *kw = halloc<float>(HD), *inv = halloc<float>(n_rot / 2);
    float *kf = halloc<float>(cache), *vf = halloc<float>(cache);
    uint16_t *kh = halloc<uint16_t>(cache), *vh = halloc<uint16_t>(cache);
    for (int i = 0; i < Q; i++) q[i] = c->rng.normal();
    for (int i = 0; i < KV; i++) kv[i] = c->rng.normal(), v[i] = c->rng.normal();
    for (int i = 0; i < HD; i++) qw[i] = 0.2f * c->rng.normal(), kw[i] = 0.2f * c->rng.normal();
    for (int i = 0; i < n_rot / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)n_rot);
    random_cache(c, cache, kh, kf); /* row pos0 holds junk until the kernel stores it */
    random_cache(c, cache, vh, vf);
    float *dq = dalloc<float>(Q), *dk = dalloc<float>(KV), *dv = dalloc<float>(KV), *dout = dalloc<float>(Q);
    float *dqw = dalloc<float>(HD), *dkw = dalloc<float>(HD), *dinv = dalloc<float>(n_rot / 2);
    __half *kc = dalloc<__half>(cache), *vc = dalloc<__half>(cache);
    upload(dq, q, Q), upload(dk, kv, KV), upload(dv, v, KV), upload(dqw, qw, HD), upload(dkw, kw, HD);
    upload(dinv, inv, n_rot / 2);
    cudaMemcpy(kc, kh, 2 * cache, cudaMemcpyHostToDevice);
    cudaMemcpy(vc, vh, 2 * cache, cudaMemcpyHostToDevice);
    A.q = dq, A.out = dout, A.k = kc, A.v = vc;
    A.rope = 1, A.kf = dk, A.vf = dv, A.norm_off = 1.0f, A.eps = 1e-6f, A.inv_freq = dinv;
    A.n_rot = n_rot, A.neox = k.neox;
    if (k.qk_norm) A.q_norm = dqw, A.k_norm = dkw;
    const int rc = dp_cu_attention(&A, c->st);
    cudaStreamSynchronize(c->st);
    /* the CPU: norm (weights + 1), rope, f16 store, attention */
    if (k.qk_norm) {
        cpu_rmsnorm(&c->cpu, q, q, qw, 1.0f, NH, HD, 1e-6f);
        cpu_rmsnorm(&c->cpu, kv, kv, kw, 1.0f, NKV, HD, 1e-6f);
    }
    for (int h = 0; h < NH; h++) cpu_rope(q + h * HD, n_rot, inv, (float)pos0, (dp_rope_style)k.neox);
    for (int h = 0; h < NKV; h++) cpu_rope(kv + h * HD, n_rot, inv, (float)pos0, (dp_rope_style)k.neox);
    for (int i = 0; i < KV; i++) {
        kf[(size_t)pos0 * KV + i] = dp_fp16_to_f32(dp_f32_to_fp16(kv[i]));
        vf[(size_t)pos0 * KV + i] = dp_fp16_to_f32(dp_f32_to_fp16(v[i]));
    }
    float *ref = halloc<float>(Q), *h = halloc<float>(Q);
    cpu_reference(c, k, q, kf, vf, ref, NULL);
    download(h, dout, Q);
    const double e = rc ? INFINITY : dp_rel_l2(h, ref, Q);
    /* the cache row: k as stored vs the CPU's roped k; v exactly */
    uint16_t *row = halloc<uint16_t>(KV);
    float *rk = halloc<float>(KV);
    cudaMemcpy(row, kc + (size_t)pos0 * KV, 2 * KV, cudaMemcpyDeviceToHost);
    for (int i = 0; i < KV; i++) rk[i] = dp_fp16_to_f32(row[i]);
    const double ek = dp_rel_l2(rk, kv, KV);
    cudaMemcpy(row, vc + (size_t)pos0 * KV, 2 * KV, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < KV; i++) bad += row[i] != dp_f32_to_fp16(v[i]);
    report(c, e <= TOL && ek <= TOL && bad == 0, what, "out rel-L2 %.2e, cached k rel-L2 %.2e, %d v values differ%s%s",
           e, ek, bad, rc ? ": " : "", rc ? dp_last_error() : "");
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dqw), cudaFree(dkw), cudaFree(dinv);
    cudaFree(kc), cudaFree(vc);
    free(q), free(kv), free(v), free(qw), free(kw), free(inv), free(kf), free(vf), free(kh), free(vh), free(ref);
    free(h), free(row), free(rk);
}

} // namespace

void check_attention(Ctx *c, const AttnCase &k, int run) {
    char what[160];
    describe(k, run, what, sizeof what);
    const int splits = k.slices ? (k.splits > k.slices ? k.splits : k.slices) : k.splits;
    int *dpos = dalloc<int>(1), *dcnt = dalloc<int>((size_t)k.n * k.heads);
    float *dpart = dalloc<float>((size_t)k.n * k.heads * splits * (k.head_dim + 2));
    upload(dpos, &k.pos0, 1);
    cudaMemset(dcnt, 0, sizeof(int) * k.n * k.heads);
    AttnLaunch A;
    memset(&A, 0, sizeof A);
    A.pos0 = dpos, A.n = k.n, A.n_head = k.heads, A.n_head_kv = k.kv_heads, A.head_dim = k.head_dim;
    A.window = k.window, A.scale = 1.0f / sqrtf((float)k.head_dim), A.exclude_self = k.exclude_self;
    A.splits = splits, A.min_keys = k.min_keys, A.part = dpart, A.counters = dcnt;
    A.slices = k.slices, A.gqa = run == RUN_SPLIT ? -1 : 0;
    const int spin = dp_cu_set.gqa_spin;
    dp_cu_set.gqa_spin = run != RUN_GQA_LAST;
    if (k.rope) attention_rope(c, k, A, what);
    else attention_plain(c, k, run, A, what);
    dp_cu_set.gqa_spin = spin;
    cudaFree(dpos), cudaFree(dcnt), cudaFree(dpart);
}

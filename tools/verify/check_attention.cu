/* verify: attention over the f16 KV pages against cpu_attention on the
 * same cache (contiguous there; on the device in shuffled pages).
 * k_attention (prefill; decode of head dimensions the sliced kernels do not
 * take) with its softmax weights for tracing, and over the rows of several
 * sequences at once; the sliced decode kernels k_attn_split and k_attn_gqa
 * (both ways of combining), with and without the q/k norm, RoPE and K/V
 * store fused in, against the CPU doing those first. */
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
                  1.0f / sqrtf((float)k.head_dim), k.softcap, k.exclude_self, probs);
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
void attention_plain(Ctx *c, const AttnCase &k, int run, AttnLaunch A, const Pages &P, const char *what) {
    const int n = k.n, Q = k.heads * k.head_dim, KV = k.kv_heads * k.head_dim, n_kv = k.pos0 + n;
    const size_t cache = (size_t)n_kv * KV, nq = (size_t)n * Q, np = (size_t)n * k.heads * n_kv;
    const size_t pool = ((size_t)P.n_pages << P.shift) * KV;
    float *q = halloc<float>(nq), *kf = halloc<float>(cache), *vf = halloc<float>(cache);
    uint16_t *kh = halloc<uint16_t>(cache), *vh = halloc<uint16_t>(cache);
    for (size_t i = 0; i < nq; i++) q[i] = c->rng.normal();
    random_cache(c, cache, kh, kf);
    random_cache(c, cache, vh, vf);
    float *ref = halloc<float>(nq), *probs = halloc<float>(np), *h = halloc<float>(nq), *hp = halloc<float>(np);
    cpu_reference(c, k, q, kf, vf, ref, probs);
    float *dq = dalloc<float>(nq), *dout = dalloc<float>(nq), *dprobs = dalloc<float>(np);
    __half *dk = dalloc<__half>(pool), *dv = dalloc<__half>(pool);
    uint16_t *pk = halloc<uint16_t>(pool), *pv = halloc<uint16_t>(pool);
    memset(pk, 0xFF, 2 * pool), memset(pv, 0xFF, 2 * pool); /* NaN where no position lives */
    scatter_cache(P, 0, kh, n_kv, KV, pk);
    scatter_cache(P, 0, vh, n_kv, KV, pv);
    upload(dq, q, nq);
    cudaMemcpy(dk, pk, 2 * pool, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, pv, 2 * pool, cudaMemcpyHostToDevice);
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
    free(q), free(kf), free(vf), free(kh), free(vh), free(ref), free(probs), free(h), free(hp), free(pk), free(pv);
}

/* Decode with the q/k norm, RoPE and the K/V store fused in, against the
 * CPU doing them first (cpu_rmsnorm, cpu_rope, f16 cache); also the cache
 * row the kernel stored. */
void attention_rope(Ctx *c, const AttnCase &k, AttnLaunch A, const Pages &P, const char *what) {
    const int NH = k.heads, NKV = k.kv_heads, HD = k.head_dim, pos0 = k.pos0, n_rot = k.n_rot;
    const int Q = NH * HD, KV = NKV * HD, n_kv = pos0 + 1;
    const size_t cache = (size_t)n_kv * KV, pool = ((size_t)P.n_pages << P.shift) * KV;
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
    __half *kc = dalloc<__half>(pool), *vc = dalloc<__half>(pool);
    uint16_t *pk = halloc<uint16_t>(pool), *pv = halloc<uint16_t>(pool);
    memset(pk, 0xFF, 2 * pool), memset(pv, 0xFF, 2 * pool);
    scatter_cache(P, 0, kh, n_kv, KV, pk);
    scatter_cache(P, 0, vh, n_kv, KV, pv);
    upload(dq, q, Q), upload(dk, kv, KV), upload(dv, v, KV), upload(dqw, qw, HD), upload(dkw, kw, HD);
    upload(dinv, inv, n_rot / 2);
    cudaMemcpy(kc, pk, 2 * pool, cudaMemcpyHostToDevice);
    cudaMemcpy(vc, pv, 2 * pool, cudaMemcpyHostToDevice);
    A.q = dq, A.out = dout, A.k = kc, A.v = vc;
    A.rope = 1, A.kf = dk, A.vf = dv, A.norm_off = 1.0f, A.eps = 1e-6f, A.inv_freq = dinv;
    A.n_rot = n_rot, A.neox = k.neox, A.rope_ms = k.rope_ms;
    if (k.qk_norm) A.q_norm = dqw, A.k_norm = dkw;
    const int rc = dp_cu_attention(&A, c->st);
    cudaStreamSynchronize(c->st);
    /* the CPU: norm (weights + 1), rope, f16 store, attention */
    if (k.qk_norm) {
        cpu_rmsnorm(&c->cpu, q, q, qw, 1.0f, NH, HD, 1e-6f);
        cpu_rmsnorm(&c->cpu, kv, kv, kw, 1.0f, NKV, HD, 1e-6f);
    }
    /* the rotation, its cos and sin times rope_ms as src/cpu/forward.c applies it */
    float *cs = halloc<float>(n_rot + 2);
    cpu_rope_table(cs, n_rot, inv, (float)pos0);
    for (int i = 0; i < n_rot; i++) cs[i] *= k.rope_ms;
    for (int h = 0; h < NH; h++) cpu_rope_apply(q + h * HD, n_rot, cs, (dp_rope_style)k.neox);
    for (int h = 0; h < NKV; h++) cpu_rope_apply(kv + h * HD, n_rot, cs, (dp_rope_style)k.neox);
    free(cs);
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
    cudaMemcpy(row, kc + P.row(0, pos0) * KV, 2 * KV, cudaMemcpyDeviceToHost);
    for (int i = 0; i < KV; i++) rk[i] = dp_fp16_to_f32(row[i]);
    const double ek = dp_rel_l2(rk, kv, KV);
    cudaMemcpy(row, vc + P.row(0, pos0) * KV, 2 * KV, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < KV; i++) bad += row[i] != dp_f32_to_fp16(v[i]);
    report(c, e <= TOL && ek <= TOL && bad == 0, what, "out rel-L2 %.2e, cached k rel-L2 %.2e, %d v values differ%s%s",
           e, ek, bad, rc ? ": " : "", rc ? dp_last_error() : "");
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dqw), cudaFree(dkw), cudaFree(dinv);
    cudaFree(kc), cudaFree(vc);
    free(q), free(kv), free(v), free(qw), free(kw), free(inv), free(kf), free(vf), free(kh), free(vh), free(ref);
    free(h), free(row), free(rk), free(pk), free(pv);
}

} // namespace

void check_attention(Ctx *c, const AttnCase &k, int run) {
    char what[160];
    describe(k, run, what, sizeof what);
    const int splits = k.slices ? (k.splits > k.slices ? k.splits : k.slices) : k.splits;
    int *dcnt = dalloc<int>((size_t)k.n * k.heads);
    float *dpart = dalloc<float>((size_t)k.n * k.heads * splits * (k.head_dim + 2));
    cudaMemset(dcnt, 0, sizeof(int) * k.n * k.heads);
    /* one sequence in pages of 16 or 64 positions */
    Pages P;
    const int n_kv = k.pos0 + k.n;
    make_pages(c, &P, 1, &n_kv, (c->rng.next() & 1) ? 6 : 4);
    int *pos = halloc<int>(k.n), *seq = halloc<int>(k.n);
    for (int i = 0; i < k.n; i++) pos[i] = k.pos0 + i, seq[i] = 0;
    set_rows(&P, k.n, pos, seq);
    AttnLaunch A;
    memset(&A, 0, sizeof A);
    A.kv = P.kv(), A.n = k.n, A.n_head = k.heads, A.n_head_kv = k.kv_heads, A.head_dim = k.head_dim;
    A.window = k.window, A.scale = 1.0f / sqrtf((float)k.head_dim), A.exclude_self = k.exclude_self;
    A.softcap = k.softcap;
    A.splits = splits, A.min_keys = k.min_keys, A.part = dpart, A.counters = dcnt;
    A.slices = k.slices, A.gqa = run == RUN_SPLIT ? -1 : 0;
    const int spin = dp_cu_set.gqa_spin;
    dp_cu_set.gqa_spin = run != RUN_GQA_LAST;
    if (k.rope) attention_rope(c, k, A, P, what);
    else attention_plain(c, k, run, A, P, what);
    dp_cu_set.gqa_spin = spin;
    cudaFree(dcnt), cudaFree(dpart);
    free_pages(&P);
    free(pos), free(seq);
}

/* k_attention over the rows of several sequences at once (a batch's decode
 * rows and prompt chunks, a padding row among them), each over its own
 * shuffled pages, against cpu_attention per sequence; the padding row's
 * output must stay untouched. */
void check_attention_seqs(Ctx *c) {
    struct Shape {
        int heads, kv_heads, head_dim, window;
    };
    const Shape shapes[] = {{16, 2, 128, 0}, {4, 1, 256, 64}, {14, 2, 64, 0}};
    /* sequences: cached positions before the rows, rows (one = a decode step) */
    const int n_seq = 4, before[n_seq] = {699, 30, 299, 0}, nrows[n_seq] = {1, 7, 1, 3};
    for (const Shape &sh : shapes) {
        const int NH = sh.heads, NKV = sh.kv_heads, HD = sh.head_dim, Q = NH * HD, KV = NKV * HD;
        int lens[n_seq], n = 1; /* + the padding row */
        for (int i = 0; i < n_seq; i++) lens[i] = before[i] + nrows[i], n += nrows[i];
        Pages P;
        make_pages(c, &P, n_seq, lens, 4);
        int pos[16], seq[16], at = 0;
        for (int i = 0; i < n_seq; i++) {
            for (int r = 0; r < nrows[i]; r++) pos[at] = before[i] + r, seq[at++] = i;
            if (i == 1) pos[at] = 0, seq[at++] = -1; /* padding */
        }
        set_rows(&P, n, pos, seq);
        const size_t pool = ((size_t)P.n_pages << P.shift) * KV;
        uint16_t *pk = halloc<uint16_t>(pool), *pv = halloc<uint16_t>(pool);
        memset(pk, 0xFF, 2 * pool), memset(pv, 0xFF, 2 * pool);
        float *q = halloc<float>((size_t)n * Q), *ref = halloc<float>((size_t)n * Q), *h = halloc<float>((size_t)n * Q);
        for (size_t i = 0; i < (size_t)n * Q; i++) q[i] = c->rng.normal();
        AttnCase k = {.heads = NH, .kv_heads = NKV, .head_dim = HD};
        k.window = sh.window;
        for (int i = 0, r0 = 0; i < n_seq; i++) {
            const size_t cache = (size_t)lens[i] * KV;
            uint16_t *kh = halloc<uint16_t>(cache), *vh = halloc<uint16_t>(cache);
            float *kf = halloc<float>(cache), *vf = halloc<float>(cache);
            random_cache(c, cache, kh, kf);
            random_cache(c, cache, vh, vf);
            scatter_cache(P, i, kh, lens[i], KV, pk);
            scatter_cache(P, i, vh, lens[i], KV, pv);
            while (seq[r0] != i) r0++;
            k.n = nrows[i], k.pos0 = before[i];
            cpu_reference(c, k, q + (size_t)r0 * Q, kf, vf, ref + (size_t)r0 * Q, NULL);
            free(kh), free(vh), free(kf), free(vf);
        }
        float *dq = dalloc<float>((size_t)n * Q), *dout = dalloc<float>((size_t)n * Q);
        float *dpart = dalloc<float>((size_t)n * NH * 8 * (HD + 2));
        int *dcnt = dalloc<int>((size_t)n * NKV);
        __half *dk = dalloc<__half>(pool), *dv = dalloc<__half>(pool);
        cudaMemset(dcnt, 0, sizeof(int) * n * NKV);
        upload(dq, q, (size_t)n * Q);
        cudaMemcpy(dk, pk, 2 * pool, cudaMemcpyHostToDevice);
        cudaMemcpy(dv, pv, 2 * pool, cudaMemcpyHostToDevice);
        AttnLaunch A;
        memset(&A, 0, sizeof A);
        A.q = dq, A.out = dout, A.k = dk, A.v = dv, A.kv = P.kv(), A.n = n, A.n_head = NH, A.n_head_kv = NKV;
        A.head_dim = HD, A.window = sh.window, A.scale = 1.0f / sqrtf((float)HD), A.splits = 8, A.min_keys = 64;
        A.part = dpart, A.counters = dcnt;
        const int rc = dp_cu_attention(&A, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dout, (size_t)n * Q);
        double worst = 0;
        int untouched = 1;
        for (int r = 0; r < n; r++) {
            if (seq[r] < 0) {
                for (int i = 0; i < Q; i++) untouched &= isnan(h[(size_t)r * Q + i]);
                continue;
            }
            const double e = dp_rel_l2(h + (size_t)r * Q, ref + (size_t)r * Q, Q);
            if (!(e <= worst)) worst = e;
        }
        char what[128];
        snprintf(what, sizeof what, "attention 4 sequences + padding h%d/%d d%d w%d", NH, NKV, HD, sh.window);
        report(c, !rc && worst <= TOL && untouched, what, "worst row rel-L2 %.2e, padding row %s%s%s", worst,
               untouched ? "untouched" : "WRITTEN", rc ? ": " : "", rc ? dp_last_error() : "");
        cudaFree(dq), cudaFree(dout), cudaFree(dpart), cudaFree(dcnt), cudaFree(dk), cudaFree(dv);
        free(pk), free(pv), free(q), free(ref), free(h);
        free_pages(&P);
    }
}

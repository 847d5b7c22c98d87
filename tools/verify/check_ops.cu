/* verify: the small ops against src/cpu/ops.c (RMSNorm, post-norm +
 * residual, the gated activations, q/k norm + RoPE + K/V store, the argmax
 * with ties) and the device sampler against the host sampler. */
#include "verify.cuh"

void check_small_ops(Ctx *c) {
    /* RMSNorm and the post-norm + residual add */
    const int n = 3, d = 1152;
    float *x = halloc<float>(n * d), *w = halloc<float>(d);
    float *o = halloc<float>(n * d), *ref = halloc<float>(n * d);
    float *h = halloc<float>(n * d);
    for (int i = 0; i < n * d; i++) x[i] = 3.0f * c->rng.normal(), o[i] = c->rng.normal();
    for (int i = 0; i < d; i++) w[i] = 1.0f + 0.3f * c->rng.normal();
    float *dx = dalloc<float>((size_t)n * d), *dw = dalloc<float>(d), *dout = dalloc<float>((size_t)n * d),
          *do_ = dalloc<float>((size_t)n * d);
    upload(dx, x, (size_t)n * d);
    upload(dw, w, d);
    upload(do_, o, (size_t)n * d);
    dp_cu_rmsnorm(dout, NULL, dx, dw, 0.5f, n, d, 1e-6f, c->st);
    cudaStreamSynchronize(c->st);
    download(h, dout, (size_t)n * d);
    cpu_rmsnorm(&c->cpu, ref, x, w, 0.5f, n, d, 1e-6f);
    double e = dp_rel_l2(h, ref, (size_t)n * d);
    report(c, e <= TOL_EXACT, "rmsnorm 3x1152", "rel-L2 %.2e (limit %.0e)", e, TOL_EXACT);
    dp_cu_postnorm_add(dx, do_, NULL, dw, 0.0f, n, d, 1e-6f, c->st);
    cudaStreamSynchronize(c->st);
    download(h, dx, (size_t)n * d);
    cpu_rmsnorm(&c->cpu, o, o, w, 0.0f, n, d, 1e-6f);
    cpu_add(x, o, n * d);
    e = dp_rel_l2(h, x, (size_t)n * d);
    report(c, e <= TOL_EXACT, "post-norm + residual 3x1152", "rel-L2 %.2e", e);
    cudaFree(dx), cudaFree(dw), cudaFree(dout), cudaFree(do_);
    free(x), free(w), free(o), free(ref), free(h);

    /* gated activations */
    const long long N = 10007;
    float *g = halloc<float>(N), *u = halloc<float>(N);
    float *r2 = halloc<float>(N), *h2 = halloc<float>(N);
    for (long long i = 0; i < N; i++) g[i] = 4.0f * c->rng.normal(), u[i] = c->rng.normal();
    float *dg = dalloc<float>(N), *du = dalloc<float>(N), *dr = dalloc<float>(N);
    upload(dg, g, N);
    upload(du, u, N);
    for (int act = 0; act < 2; act++) {
        cudaMemset(dr, 0xFF, N * 4);
        dp_cu_gated_act(dr, dg, du, N, act, c->st);
        cudaStreamSynchronize(c->st);
        download(h2, dr, N);
        cpu_gated_act(&c->cpu, r2, g, u, N, (dp_act)act);
        e = dp_rel_l2(h2, r2, N);
        report(c, e <= TOL_EXACT, act ? "gated act gelu-tanh" : "gated act silu", "rel-L2 %.2e", e);
    }
    cudaFree(dg), cudaFree(du), cudaFree(dr);
    free(g), free(u), free(r2), free(h2);

    /* q/k norm + RoPE + KV store, both styles, partial rotation */
    for (int style = 0; style < 2; style++) {
        const int nt = 4, NH = 4, NKV = 2, HD = 128, n_rot = style ? 128 : 64, pos0 = 1000;
        const int Qd = NH * HD, KVd = NKV * HD, ctx = pos0 + nt;
        float *q = halloc<float>(nt * Qd), *k = halloc<float>(nt * KVd);
        float *v = halloc<float>(nt * KVd), *qw = halloc<float>(HD);
        float *kw = halloc<float>(HD), *inv = halloc<float>(n_rot / 2);
        for (int i = 0; i < nt * Qd; i++) q[i] = c->rng.normal();
        for (int i = 0; i < nt * KVd; i++) k[i] = c->rng.normal(), v[i] = c->rng.normal();
        for (int i = 0; i < HD; i++) qw[i] = 1.0f + 0.2f * c->rng.normal(), kw[i] = 1.0f + 0.2f * c->rng.normal();
        for (int i = 0; i < n_rot / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)n_rot);
        float *dq = dalloc<float>((size_t)nt * Qd), *dk = dalloc<float>((size_t)nt * KVd),
              *dv = dalloc<float>((size_t)nt * KVd), *dqw = dalloc<float>(HD), *dkw = dalloc<float>(HD),
              *dinv = dalloc<float>(n_rot / 2);
        Pages P; /* the rows' K/V go to shuffled pages of 16 positions */
        make_pages(c, &P, 1, &ctx, 4);
        const int rpos[nt] = {pos0, pos0 + 1, pos0 + 2, pos0 + 3}, rseq[nt] = {0, 0, 0, 0};
        set_rows(&P, nt, rpos, rseq);
        const size_t pool = ((size_t)P.n_pages << P.shift) * KVd;
        __half *kc = dalloc<__half>(pool), *vc = dalloc<__half>(pool);
        upload(dq, q, (size_t)nt * Qd), upload(dk, k, (size_t)nt * KVd), upload(dv, v, (size_t)nt * KVd);
        upload(dqw, qw, HD), upload(dkw, kw, HD), upload(dinv, inv, n_rot / 2);
        RopeLaunch R;
        memset(&R, 0, sizeof R);
        R.q = dq, R.k = dk, R.v = dv, R.kc = kc, R.vc = vc, R.kv = P.kv();
        R.n = nt, R.n_head = NH, R.n_head_kv = NKV, R.head_dim = HD, R.n_rot = n_rot, R.neox = style;
        R.q_norm = dqw, R.k_norm = dkw, R.norm_off = 0.0f, R.eps = 1e-6f, R.inv_freq = dinv, R.rope_ms = 1.0f;
        dp_cu_qk_rope_store(&R, c->st);
        cudaStreamSynchronize(c->st);
        cpu_rmsnorm(&c->cpu, q, q, qw, 0.0f, nt * NH, HD, 1e-6f);
        cpu_rmsnorm(&c->cpu, k, k, kw, 0.0f, nt * NKV, HD, 1e-6f);
        for (int i = 0; i < nt; i++) {
            for (int hh = 0; hh < NH; hh++)
                cpu_rope(q + (size_t)i * Qd + hh * HD, n_rot, inv, (float)(pos0 + i), (dp_rope_style)style);
            for (int hh = 0; hh < NKV; hh++)
                cpu_rope(k + (size_t)i * KVd + hh * HD, n_rot, inv, (float)(pos0 + i), (dp_rope_style)style);
        }
        float *hq = halloc<float>(nt * Qd), *hk = halloc<float>(nt * KVd);
        download(hq, dq, (size_t)nt * Qd);
        download(hk, dk, (size_t)nt * KVd);
        double eq = dp_rel_l2(hq, q, (size_t)nt * Qd), ek = dp_rel_l2(hk, k, (size_t)nt * KVd);
        /* the cache rows of positions pos0.. (in their pages) hold k and v as f16 */
        __half *hc = (__half *)malloc(sizeof(__half) * nt * KVd);
        size_t bad = 0;
        for (int kvi = 0; kvi < 2; kvi++)
            for (int r = 0; r < nt; r++) {
                cudaMemcpy(hc, (kvi ? vc : kc) + P.row(0, pos0 + r) * KVd, sizeof(__half) * KVd, cudaMemcpyDeviceToHost);
                for (int i = 0; i < KVd; i++) {
                    uint16_t b;
                    memcpy(&b, &hc[i], 2);
                    bad += b != dp_f32_to_fp16(kvi ? v[(size_t)r * KVd + i] : hk[(size_t)r * KVd + i]);
                }
            }
        char what[96];
        snprintf(what, sizeof what, "qk-norm + rope %s (n_rot %d)", style ? "neox" : "adjacent", n_rot);
        report(c, eq <= TOL_EXACT && ek <= TOL_EXACT && bad == 0, what,
               "q rel-L2 %.2e, k rel-L2 %.2e, %zu cache values differ", eq, ek, bad);
        cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dqw), cudaFree(dkw), cudaFree(dinv), cudaFree(kc),
            cudaFree(vc);
        free_pages(&P);
        free(q), free(k), free(v), free(qw), free(kw), free(inv), free(hq), free(hk), free(hc);
    }

    /* argmax with ties: the lowest index wins, as in the CPU sampler */
    const int nv = 262144;
    float *lg = halloc<float>(nv);
    for (int i = 0; i < nv; i++) lg[i] = (float)(c->rng.next() % 1000) * 0.01f - 5.0f;
    int want = 0;
    for (int i = 1; i < nv; i++)
        if (lg[i] > lg[want]) want = i;
    float *dl = dalloc<float>(nv);
    unsigned long long *dkey = dalloc<unsigned long long>(1), key = 0;
    upload(dl, lg, nv);
    cudaMemset(dkey, 0, 8);
    dp_cu_argmax(dl, nv, dkey, c->st);
    cudaStreamSynchronize(c->st);
    download(&key, dkey, 1);
    int got = key_token(key);
    report(c, got == want, "argmax 262144 with ties", "device %d, CPU %d", got, want);
    cudaFree(dl), cudaFree(dkey);
    free(lg);
}

/* Device sampling against the host sampler: twin samplers with the same
 * seed, the device one drawing its uniform first; the same token expected
 * (a difference only where the uniform falls within float rounding of a
 * boundary: then the token must be one of the host's candidates). */
void check_sampler(Ctx *c, int V) {
    struct Cfg {
        float temp, top_p, min_p, pen;
        int top_k;
    } cfg[] = {{0.8f, 0.95f, 0.05f, 1.0f, 40}, {1.0f, 1.0f, 0.0f, 1.0f, 40},  {1.5f, 0.5f, 0.0f, 1.0f, 256},
               {0.7f, 0.9f, 0.1f, 1.3f, 64},   {0.0f, 1.0f, 0.0f, 1.3f, 40},  {1.0f, 1.0f, 0.0f, 1.0f, 1},
               {2.0f, 0.99f, 0.0f, 1.1f, 200}};
    float *lg = halloc<float>(V);
    float *dl = dalloc<float>(V);
    const int nb = dp_cu_sample_blocks(V);
    uint32_t *ck = dalloc<uint32_t>((size_t)nb * DP_SAMPLE_KMAX);
    int *ci = dalloc<int>((size_t)nb * DP_SAMPLE_KMAX), *dtok = dalloc<int>(1);
    DpSampleArgs *dsp = dalloc<DpSampleArgs>(1), hsp;
    for (size_t ic = 0; ic < sizeof cfg / sizeof cfg[0]; ic++) {
        dp_sampler_params sp;
        dp_sampler_params_default(&sp);
        sp.temp = cfg[ic].temp, sp.top_p = cfg[ic].top_p, sp.min_p = cfg[ic].min_p;
        sp.repeat_penalty = cfg[ic].pen, sp.top_k = cfg[ic].top_k, sp.seed = c->rng.next();
        dp_sampler *hs = dp_sampler_new(&sp, V), *ds = dp_sampler_new(&sp, V);
        int same = 0, near = 0, bad = 0, steps = 12;
        for (int step = 0; step < steps; step++) {
            /* logits: normal x 3, a few exact ties at the top */
            for (int i = 0; i < V; i++) lg[i] = 3.0f * c->rng.normal();
            for (int t = 0; t < 6; t++) lg[c->rng.next() % V] = 12.0f;
            upload(dl, lg, V);
            memset(&hsp, 0, sizeof hsp);
            hsp.u = sp.temp > 0 ? dp_sampler_uniform(ds) : 0.0;
            hsp.temp = sp.temp, hsp.top_p = sp.top_p, hsp.min_p = sp.min_p, hsp.penalty = sp.repeat_penalty;
            hsp.top_k = sp.temp > 0 ? sp.top_k : 1;
            const int32_t *rec;
            const int nr = sp.repeat_penalty != 1.0f ? dp_sampler_recent(ds, &rec) : 0;
            for (int i = 0; i < nr; i++) {
                int seen = 0;
                for (int j = 0; j < hsp.n_recent; j++) seen |= hsp.recent[j] == rec[i];
                if (!seen) hsp.recent[hsp.n_recent++] = rec[i];
            }
            upload(dsp, &hsp, 1);
            int rc = dp_cu_sample(dl, V, dsp, ck, ci, dtok, c->st);
            cudaStreamSynchronize(c->st);
            int dev = -1;
            download(&dev, dtok, 1);
            const int host = dp_sampler_sample(hs, lg);
            if (rc) bad++;
            else if (dev == host) same++;
            else {
                /* allowed only at a rounding boundary: the device token must be
                 * one of the top k of the penalised logits */
                float *pl = halloc<float>(V);
                memcpy(pl, lg, sizeof(float) * V);
                for (int i = 0; i < hsp.n_recent; i++) {
                    float &l = pl[hsp.recent[i]];
                    l = l > 0 ? l / sp.repeat_penalty : l * sp.repeat_penalty;
                }
                const float mine = dev >= 0 && dev < V ? pl[dev] : -INFINITY;
                int above = 0;
                for (int i = 0; i < V; i++) above += pl[i] > mine;
                if (dev >= 0 && dev < V && above < hsp.top_k) near++;
                else bad++;
                free(pl);
            }
            dp_sampler_accept(hs, host);
            dp_sampler_accept(ds, host);
        }
        char what[128];
        snprintf(what, sizeof what, "device sampling V%d temp %.1f top-k %d top-p %.2f min-p %.2f pen %.1f", V,
                 sp.temp, sp.top_k, sp.top_p, sp.min_p, sp.repeat_penalty);
        report(c, bad == 0 && near <= 1, what, "%d of %d tokens equal the host sampler's, %d at a boundary, %d wrong",
               same, steps, near, bad);
        dp_sampler_free(hs);
        dp_sampler_free(ds);
    }
    cudaFree(dl), cudaFree(ck), cudaFree(ci), cudaFree(dtok), cudaFree(dsp);
    free(lg);
}

/* Sampler: greedy is argmax; truncations reduce to greedy at their limits;
 * draws follow softmax(logits / T); seeds replay; repetition penalty; every
 * rule together against an independent reference (the one-pass top-k). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "sampler.h"
#include "testlib.h"

#define V 50

static void fill(float *l) {
    for (int i = 0; i < V; i++) l[i] = t_rand_normal() * 2.0f;
}

static int argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static dp_sampler *mk(float temp, int top_k, float top_p, float min_p, float rep, uint64_t seed) {
    dp_sampler_params p;
    dp_sampler_params_default(&p);
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = rep;
    p.seed = seed;
    return dp_sampler_new(&p, V);
}

/* An independent reference of the whole rule (penalty once per distinct
 * recent token -> sort by logit, lower id first on ties -> top-k -> top-p
 * -> min-p -> temperature -> draw with u), in the sampler's arithmetic. */
typedef struct {
    int id;
    float logit, p;
} rc;
static int rc_cmp(const void *a, const void *b) {
    const rc *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}
static int ref_sample(const float *logits, int n, const dp_sampler_params *p, const int32_t *recent, int n_recent,
                      double u01) {
    rc *c = malloc(sizeof(rc) * (size_t)n);
    for (int i = 0; i < n; i++) c[i] = (rc){i, logits[i], 0};
    for (int i = 0; i < n_recent; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= recent[j] == recent[i];
        if (seen || p->repeat_penalty == 1.0f) continue;
        float *l = &c[recent[i]].logit;
        *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
    }
    qsort(c, (size_t)n, sizeof(rc), rc_cmp);
    int m = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double sum = 0;
    for (int i = 0; i < m; i++) sum += (c[i].p = expf(c[i].logit - c[0].logit));
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < m; i++) {
            acc += c[i].p / sum;
            if (acc >= p->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        int keep = 1;
        while (keep < m && c[keep].p >= p->min_p * c[0].p) keep++;
        m = keep;
    }
    sum = 0;
    for (int i = 0; i < m; i++) sum += (c[i].p = expf((c[i].logit - c[0].logit) / p->temp));
    double u = u01 * sum, acc = 0;
    int got = c[m - 1].id;
    for (int i = 0; i < m; i++) {
        acc += c[i].p;
        if (u < acc) {
            got = c[i].id;
            break;
        }
    }
    free(c);
    return got;
}

/* Sampled draws against the reference on fresh random vocabularies of
 * 2..20000 tokens with many ties (integer logits), +-inf and -0, top-k
 * from 1 to past the vocabulary, penalties above and below 1 on recent
 * tokens that repeat: the sampler's one-pass top-k must keep exactly the
 * k the full sort keeps, in its order. NaN logits: a valid token. */
static void against_reference(void) {
    int draws = 0, bad = 0;
    for (int it = 0; it < 400; it++) {
        const int n = it % 10 == 0 ? 2 + (int)(t_rand_u64() % 20) : 100 + (int)(t_rand_u64() % 20000);
        float *l = malloc(sizeof(float) * (size_t)n);
        const int mode = it % 4;
        for (int i = 0; i < n; i++) {
            l[i] = mode == 0 ? 3.0f * t_rand_normal() : (float)(int)(3.0f * t_rand_normal());
            const int r = (int)(t_rand_u64() % 64);
            if (mode == 2 && r == 0) l[i] = -INFINITY;
            if (mode == 2 && r == 1) l[i] = -0.0f;
            if (mode == 3 && r == 0) l[i] = INFINITY;
        }
        dp_sampler_params p;
        dp_sampler_params_default(&p);
        p.temp = 0.2f + 1.5f * (float)t_rand_unit();
        p.top_k = (int)(t_rand_u64() % 3 == 0 ? t_rand_u64() % (uint64_t)(n + 5) : 1 + t_rand_u64() % 64);
        p.top_p = t_rand_u64() % 2 ? 1.0f : 0.5f + 0.5f * (float)t_rand_unit();
        p.min_p = t_rand_u64() % 2 ? 0.0f : 0.1f * (float)t_rand_unit();
        p.repeat_penalty = it % 3 == 0 ? 1.0f : it % 3 == 1 ? 1.3f : 0.7f;
        p.repeat_last_n = 16;
        p.seed = t_rand_u64();
        dp_sampler *s = dp_sampler_new(&p, n), *twin = dp_sampler_new(&p, n);
        int32_t recent[16];
        int n_recent = 0;
        for (int d = 0; d < 6; d++) {
            const int got = dp_sampler_sample(s, l);
            const int want = ref_sample(l, n, &p, recent, n_recent, dp_sampler_uniform(twin));
            draws++;
            if (got != want && bad++ < 5)
                fprintf(stderr, "n %d top-k %d top-p %g min-p %g penalty %g: %d, reference %d\n", n, p.top_k, p.top_p,
                        p.min_p, p.repeat_penalty, got, want);
            /* the context: the token drawn, sometimes an old one again */
            const int32_t t = d % 3 == 2 && n_recent ? recent[0] : got;
            dp_sampler_accept(s, t);
            if (n_recent < 16) recent[n_recent++] = t;
        }
        if (it % 8 == 0) { /* NaNs: still a token of the vocabulary */
            l[t_rand_u64() % (uint64_t)n] = NAN;
            const int got = dp_sampler_sample(s, l);
            CHECKF(got >= 0 && got < n, "with a NaN logit: token %d of %d", got, n);
        }
        dp_sampler_free(s);
        dp_sampler_free(twin);
        free(l);
    }
    CHECKF(bad == 0, "%d of %d draws differ from the reference", bad, draws);
    /* a tie at the heap's bottom between a recent token (penalised 0 stays 0) and lower ids scanned later: top-1
     * of all-zero logits is token 0 */
    float z[64] = {0};
    dp_sampler_params p;
    dp_sampler_params_default(&p);
    p.temp = 1.0f, p.top_k = 1, p.repeat_penalty = 1.3f;
    dp_sampler *s = dp_sampler_new(&p, 64);
    dp_sampler_accept(s, 63);
    CHECKF(dp_sampler_sample(s, z) == 0, "top-1 of equal logits with a recent token 63: %d", dp_sampler_sample(s, z));
    dp_sampler_free(s);
}

int main(void) {
    t_seed();
    float l[V];
    for (int it = 0; it < 50; it++) {
        fill(l);
        int want = argmax(l);
        dp_sampler *g = mk(0, 40, 0.95f, 0.05f, 1, 1);
        dp_sampler *k1 = mk(1.0f, 1, 1, 0, 1, t_rand_u64());
        dp_sampler *p0 = mk(1.0f, 0, 1e-6f, 0, 1, t_rand_u64());
        dp_sampler *m1 = mk(1.0f, 0, 1, 1.0f, 1, t_rand_u64());
        CHECK(dp_sampler_sample(g, l) == want);
        CHECK(dp_sampler_sample(k1, l) == want);
        CHECK(dp_sampler_sample(p0, l) == want);
        CHECK(dp_sampler_sample(m1, l) == want);
        dp_sampler_free(g);
        dp_sampler_free(k1);
        dp_sampler_free(p0);
        dp_sampler_free(m1);
    }

    /* greedy over a vocabulary of awkward values (ties, NaN, +-0, -inf, sizes not a multiple of 8):
     * the first maximum, NaNs never winning, a NaN at 0 staying */
    for (int it = 0; it < 300; it++) {
        int n = 1 + (int)(t_rand_u64() % 300);
        float big[300];
        int mode = it % 6;
        for (int i = 0; i < n; i++) big[i] = mode == 0 ? t_rand_normal() : (float)(int)(t_rand_normal() * 2.0f);
        for (int i = 0; i < n; i++) {
            int r = (int)(t_rand_u64() % 16);
            if (mode >= 2 && r == 0) big[i] = NAN;
            if (mode >= 3 && r == 1) big[i] = -INFINITY;
            if (mode >= 4 && r == 2) big[i] = r % 2 ? 0.0f : -0.0f;
            if (mode == 5 && r == 3) big[i] = -0.0f;
        }
        if (it % 7 == 0) big[0] = NAN;
        if (it % 11 == 0)
            for (int i = 0; i < n; i++) big[i] = -INFINITY;
        int want = 0;
        for (int i = 1; i < n; i++)
            if (big[i] > big[want]) want = i;
        dp_sampler_params p;
        dp_sampler_params_default(&p);
        p.temp = 0;
        dp_sampler *g = dp_sampler_new(&p, n);
        int got = dp_sampler_sample(g, big);
        CHECKF(got == want, "greedy over %d values (mode %d): %d, expected %d", n, mode, got, want);
        dp_sampler_free(g);
    }

    /* the same seed replays the same draws; another seed differs */
    fill(l);
    dp_sampler *a = mk(1.5f, 0, 1, 0, 1, 42), *b = mk(1.5f, 0, 1, 0, 1, 42), *c = mk(1.5f, 0, 1, 0, 1, 43);
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) {
        int x = dp_sampler_sample(a, l), y = dp_sampler_sample(b, l), z = dp_sampler_sample(c, l);
        same &= x == y;
        diff |= x != z;
    }
    CHECK(same);
    CHECK(diff);
    dp_sampler_free(a);
    dp_sampler_free(b);
    dp_sampler_free(c);

    /* frequencies follow softmax(l / T) (no truncation) */
    float T = 0.7f;
    double p[V], sum = 0;
    for (int i = 0; i < V; i++) sum += (p[i] = exp(l[i] / T));
    for (int i = 0; i < V; i++) p[i] /= sum;
    dp_sampler *s = mk(T, 0, 1, 0, 1, t_rand_u64());
    int counts[V] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) counts[dp_sampler_sample(s, l)]++;
    double chi2 = 0;
    int dof = 0;
    for (int i = 0; i < V; i++)
        if (p[i] * N >= 5) {
            chi2 += (counts[i] - p[i] * N) * (counts[i] - p[i] * N) / (p[i] * N);
            dof++;
        }
    /* generous bound: chi2 with dof-1 degrees of freedom has mean dof-1 */
    CHECKF(chi2 < 3.0 * dof + 30, "chi2 %.1f with %d cells", chi2, dof);
    dp_sampler_free(s);

    /* top-k: only the k best are ever drawn */
    s = mk(5.0f, 3, 1, 0, 1, t_rand_u64());
    float sorted[V];
    memcpy(sorted, l, sizeof sorted);
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (sorted[j] > sorted[i]) { float t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t; }
    int ok = 1;
    for (int i = 0; i < 2000; i++) ok &= l[dp_sampler_sample(s, l)] >= sorted[2];
    CHECK(ok);
    dp_sampler_free(s);

    /* repetition penalty: a penalised winner loses to the runner-up */
    float r[V];
    for (int i = 0; i < V; i++) r[i] = -1.0f;
    r[7] = 2.0f;
    r[9] = 1.5f;
    s = mk(0, 0, 1, 0, 2.0f, 1);
    CHECK(dp_sampler_sample(s, r) == 7);
    dp_sampler_accept(s, 7);
    CHECK(dp_sampler_sample(s, r) == 9);
    dp_sampler_free(s);

    against_reference();

    /* invalid parameters are refused */
    CHECK(mk(-1.0f, 0, 1, 0, 1, 1) == NULL);
    CHECK(mk(1.0f, 0, 0.0f, 0, 1, 1) == NULL);
    CHECK(mk(1.0f, -2, 1, 0, 1, 1) == NULL);
    return t_done("test_sampler");
}

/* Sampler: greedy is argmax; truncations reduce to greedy at their limits;
 * draws follow softmax(logits / T); seeds replay; repetition penalty. */
#include <math.h>
#include <string.h>

#include "doppler.h"
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

    /* invalid parameters are refused */
    CHECK(mk(-1.0f, 0, 1, 0, 1, 1) == NULL);
    CHECK(mk(1.0f, 0, 0.0f, 0, 1, 1) == NULL);
    CHECK(mk(1.0f, -2, 1, 0, 1, 1) == NULL);
    return t_done("test_sampler");
}

/* Sampling: repetition penalty -> top-k -> top-p -> min-p -> temperature ->
 * draw. Temperature 0 is greedy (argmax, lowest id on ties). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "util.h"

typedef struct {
    int32_t id;
    float logit;
    float p;
} cand;

struct dp_sampler {
    dp_sampler_params p;
    int n_vocab;
    cand *c;                 /* n_vocab candidates, allocated once */
    int32_t *recent;         /* ring of the last repeat_last_n tokens */
    unsigned char *mark;     /* per token: a recent one, while top_k_scan runs (else all zero) */
    int n_recent, recent_pos;
    uint64_t rng[4];
};

void dp_sampler_params_default(dp_sampler_params *p) {
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static uint64_t next_u64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

void dp_sampler_reset(dp_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->n_recent = s->recent_pos = 0;
}

dp_sampler *dp_sampler_new(const dp_sampler_params *p, int n_vocab) {
    if (n_vocab <= 0) {
        dp_set_error(DP_ERR_ARG, "sampler: vocabulary size must be positive");
        return NULL;
    }
    if (!(p->temp >= 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repeat_penalty > 0) || p->repeat_last_n < 0) {
        dp_set_error(DP_ERR_ARG, "sampler: invalid parameters (temp >= 0, top-k >= 0, 0 < top-p <= 1, "
                                 "0 <= min-p <= 1, repeat-penalty > 0)");
        return NULL;
    }
    dp_sampler *s = dp_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = dp_malloc(sizeof(cand) * (size_t)n_vocab);
    s->recent = dp_malloc(sizeof(int32_t) * (size_t)(p->repeat_last_n ? p->repeat_last_n : 1));
    s->mark = dp_calloc((size_t)n_vocab, 1);
    if (!s->c || !s->recent || !s->mark) {
        dp_sampler_free(s);
        return NULL;
    }
    dp_sampler_reset(s);
    return s;
}

void dp_sampler_free(dp_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->recent);
    free(s->mark);
    free(s);
}

void dp_sampler_accept(dp_sampler *s, int32_t tok) {
    if (!s->p.repeat_last_n) return;
    s->recent[s->recent_pos] = tok;
    s->recent_pos = (s->recent_pos + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Heap order: a is worse than b (a lower logit, or the same and a higher
 * id); the k best under it are unique, whatever order they came in. */
static inline int worse(const cand *a, const cand *b) {
    return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

/* Restores the heap of c[0..k) below j (the worst at the root). */
static void heap_sift(cand *c, int k, int j) {
    for (;;) {
        int l = 2 * j + 1, r = l + 1, m = j;
        if (l < k && worse(&c[l], &c[m])) m = l;
        if (r < k && worse(&c[r], &c[m])) m = r;
        if (m == j) return;
        cand t = c[j];
        c[j] = c[m];
        c[m] = t;
        j = m;
    }
}

/* Keeps the k largest logits at the front of c (sorted), via a min-heap. */
static int top_k_select(cand *c, int n, int k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof(cand), cmp_desc);
        return n;
    }
    for (int i = k / 2 - 1; i >= 0; i--) heap_sift(c, k, i);
    for (int i = k; i < n; i++) {
        if (!worse(&c[0], &c[i])) continue;
        c[0] = c[i];
        heap_sift(c, k, 0);
    }
    qsort(c, (size_t)k, sizeof(cand), cmp_desc);
    return k;
}

/* Adds x to the heap c[0..h) of at most k: filling it, or replacing its
 * worst when x is better. Returns the new h. */
static inline __attribute__((always_inline)) int heap_offer(cand *c, int h, int k, cand x) {
    if (h < k) {
        c[h++] = x;
        if (h == k)
            for (int j = k / 2 - 1; j >= 0; j--) heap_sift(c, k, j);
    } else if (worse(&c[0], &x)) {
        c[0] = x;
        heap_sift(c, k, 0);
    }
    return h;
}

/* The logit the sampler sees for a recent token: penalised once */
static inline float penalised(float l, float pen) { return l > 0 ? l / pen : l * pen; }

/* top_k_select's result (c[0..k) sorted, penalties applied) without
 * copying the vocabulary: the penalised recent tokens go into the heap
 * first, then every other logit; a run of 8 below the heap's worst is
 * skipped with one test. 0 (nothing decided) when a logit is NaN, whose
 * place in the order only the copy's path defines. */
static int top_k_scan(dp_sampler *s, const float *logits, int k) {
    const int n = s->n_vocab;
    cand *c = s->c;
    int h = 0, bad = 0;
    if (s->p.repeat_penalty != 1.0f)
        for (int i = 0; i < s->n_recent; i++) {
            const int32_t t = s->recent[i];
            if (s->mark[t]) continue; /* each distinct token once */
            s->mark[t] = 1;
            const cand x = {t, penalised(logits[t], s->p.repeat_penalty), 0};
            bad |= x.logit != x.logit;
            h = heap_offer(c, h, k, x);
        }
    for (int i = 0; i < n; i++) {
        if (h == k && i + 8 <= n && i % 8 == 0) {
            const float t = c[0].logit, *l = logits + i;
            /* NaN compares false: such a run is looked at value by value */
            if (l[0] < t && l[1] < t && l[2] < t && l[3] < t && l[4] < t && l[5] < t && l[6] < t && l[7] < t) {
                i += 7;
                continue;
            }
        }
        const float v = logits[i];
        bad |= v != v;
        if (!s->mark[i]) h = heap_offer(c, h, k, (cand){i, v, 0});
    }
    if (s->p.repeat_penalty != 1.0f)
        for (int j = 0; j < s->n_recent; j++) s->mark[s->recent[j]] = 0;
    if (bad || h < k) return 0;
    qsort(c, (size_t)k, sizeof(cand), cmp_desc);
    return k;
}

/* Greedy on logits as they are, without copying the vocabulary: the index
 * the argmax loop of dp_sampler_sample returns (the first maximum; NaNs never
 * win, a NaN at 0 stays), in two passes: the maximum over 8 independent
 * lanes (no chain of dependent compares), then its first occurrence. */
static int argmax_first(const float *x, int n) {
    if (x[0] != x[0]) return 0;
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float best = m[0];
    for (int k = 1; k < 8; k++) best = m[k] > best ? m[k] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

/* The vocabulary copied into c with the penalties applied: greedy's pick
 * (as -1 - id), or top_k_select's count. */
static int copy_select(dp_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    cand *c = s->c;
    for (int i = 0; i < n; i++) {
        c[i].id = i;
        c[i].logit = logits[i];
    }
    if (s->p.repeat_penalty != 1.0f)
        for (int i = 0; i < s->n_recent; i++) {
            cand *t = &c[s->recent[i]];
            /* each distinct token is penalised once */
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= s->recent[j] == s->recent[i];
            if (seen) continue;
            t->logit = penalised(t->logit, s->p.repeat_penalty);
        }
    if (s->p.temp <= 0) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        return -1 - c[best].id;
    }
    return top_k_select(c, n, s->p.top_k > 0 ? s->p.top_k : n);
}

int32_t dp_sampler_sample(dp_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    cand *c = s->c;
    if (s->p.temp <= 0 && (s->p.repeat_penalty == 1.0f || s->n_recent == 0)) return argmax_first(logits, n);
    /* top-k: the k best found in one pass over the logits (the same k, in the same order) */
    int m = s->p.temp > 0 && s->p.top_k > 0 && s->p.top_k < n ? top_k_scan(s, logits, s->p.top_k) : 0;
    if (!m) m = copy_select(s, logits);
    if (m < 0) return -1 - m;
    /* probabilities at temperature 1 for the truncation rules */
    double sum = 0;
    for (int i = 0; i < m; i++) sum += (c[i].p = expf(c[i].logit - c[0].logit));
    if (s->p.top_p < 1.0f) {
        double acc = 0;
        int keep = m;
        for (int i = 0; i < m; i++) {
            acc += c[i].p / sum;
            if (acc >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    if (s->p.min_p > 0) {
        int keep = 1;
        while (keep < m && c[keep].p >= s->p.min_p * c[0].p) keep++;
        m = keep;
    }
    /* temperature, then draw */
    sum = 0;
    for (int i = 0; i < m; i++) sum += (c[i].p = expf((c[i].logit - c[0].logit) / s->p.temp));
    double u = dp_sampler_uniform(s) * sum, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += c[i].p;
        if (u < acc) return c[i].id;
    }
    return c[m - 1].id;
}

const dp_sampler_params *dp_sampler_params_of(const dp_sampler *s) { return &s->p; }

int dp_sampler_recent(const dp_sampler *s, const int32_t **toks) {
    *toks = s->recent;
    return s->n_recent;
}

double dp_sampler_uniform(dp_sampler *s) { return next_unit(s->rng); }

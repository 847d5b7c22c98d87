/* The batched engine against solo runs: several requests decoded together
 * through dp_eval_batch (prompts of 1..700 tokens prefilled in chunks
 * beside other sequences' decode steps, sequences joining and leaving
 * mid-decode, a fork that continues with a different token, a prefix
 * reused from the cache, entries shuffled between sequences, greedy
 * samplers with kept logits and greedy samplers alone, whose tokens the
 * CPU may draw from a screened LM head) must give every sequence the greedy tokens of
 * the same prompt run alone, and logits within 1e-5 relative L2 (they are
 * computed as the solo pass computes them, so they should be identical).
 * Models: the tiny fixtures of each architecture (gemma3-tiny has a
 * sliding window of 6), synthetic tiny models of every weight type and
 * architecture (window 16 on gemma3), and the default real model with text
 * prompts when it is cached; both activation paths of the CPU. */
#include <stdio.h>

#include "batch_ref.h"
#include "cpu/kernels.h"

enum { NREQ = 8, MAXGEN = 10, MAXPLAN = 64 };

typedef struct {
    int32_t *tok;        /* the full prompt: inherited part (fork) included */
    int n_prompt, n_gen, chunk, join;
    int fork_of, fork_at; /* child of request fork_of once it has fork_at tokens */
    int reuse_of;        /* prefix cached by this request, -1 = none */
    int expect_reused;
    int sampler;
    int plan[MAXPLAN], n_plan; /* the solo reference's eval calls */
    int32_t gen[MAXGEN];
    float *logits;       /* solo: n_gen x V */
    /* batch state */
    int seq, started, done, pos, n_g;
    int32_t bgen[MAXGEN];
} req;

static double g_worst;
static int g_identical, g_steps, g_tokens_only;

/* Everything but the fork children's prompts (they need the parent's tokens). */
static void make_requests(req *R, int big, int V, int32_t (*draw)(void *), void *user) {
    int lens[NREQ] = {big ? 700 : 150, 1, 2 + (int)(t_rand_u64() % 3), 5 + (int)(t_rand_u64() % 36),
                      big ? 41 + (int)(t_rand_u64() % 260) : 41 + (int)(t_rand_u64() % 30), 0, 0,
                      big ? 100 + (int)(t_rand_u64() % 100) : 20 + (int)(t_rand_u64() % 30)};
    int chunks[NREQ] = {big ? 256 : 64, 1, 4, 16, 64, 1, 32, 48};
    int joins[NREQ] = {0, 0, 1, 2, 3, 0, big ? 4 : 3, 6};
    int gens[NREQ] = {6, 8, 7, 6, 5, 5, 5, 4};
    int shared = big ? 192 : 64; /* a multiple of request 0's chunk and of a page */
    for (int i = 0; i < NREQ; i++) {
        req *r = &R[i];
        memset(r, 0, sizeof *r);
        r->n_gen = gens[i];
        r->chunk = chunks[i];
        r->join = joins[i];
        r->fork_of = r->reuse_of = -1;
        /* 0: logits only; 1: greedy with the logits kept; 2: greedy, the token alone (the CPU's screened LM head) */
        r->sampler = i % 2 ? 0 : i == 0 ? 1 : 2;
        r->tok = calloc(1024, sizeof(int32_t));
        r->logits = malloc(sizeof(float) * (size_t)V * MAXGEN);
        r->n_prompt = lens[i];
        for (int k = 0; k < lens[i]; k++) r->tok[k] = draw(user);
    }
    /* 5: fork of 3 after its third token, continuing with another token */
    R[5].fork_of = 3;
    R[5].fork_at = 3;
    /* 6: request 0's first `shared` tokens, then its own */
    req *u = &R[6];
    u->reuse_of = 0;
    u->n_prompt = shared + 1 + (int)(t_rand_u64() % 30);
    memcpy(u->tok, R[0].tok, sizeof(int32_t) * (size_t)shared);
    for (int k = shared; k < u->n_prompt; k++) u->tok[k] = draw(user);
    if (u->tok[shared] == R[0].tok[shared]) u->tok[shared] = (u->tok[shared] + 1) % V;
    u->expect_reused = shared;
}

/* Solo references in dependency order: plain ones, the reuser (its cached
 * part in the donor's calls), the fork child (the parent's calls, its
 * decode steps, then its own token). */
static int solo_all(dp_model *m, req *R, int n_ctx) {
    int V = dp_model_get_info(m)->n_vocab;
    for (int i = 0; i < NREQ; i++) {
        req *r = &R[i];
        if (r->fork_of >= 0) continue;
        r->n_plan = 0;
        int from = 0;
        if (r->reuse_of >= 0) { /* the donor's calls cut at the reused length */
            const req *d = &R[r->reuse_of];
            for (int k = 0; k < d->n_plan && from < r->expect_reused; k++) {
                int c = d->plan[k] < r->expect_reused - from ? d->plan[k] : r->expect_reused - from;
                r->plan[r->n_plan++] = c;
                from += c;
            }
        }
        r->n_plan = bt_chunks(r->plan, r->n_plan, r->n_prompt - from, r->chunk);
        if (bt_solo(m, n_ctx, r->tok, r->plan, r->n_plan, r->n_gen, r->gen, r->logits)) return -1;
    }
    for (int i = 0; i < NREQ; i++) {
        req *r = &R[i];
        if (r->fork_of < 0) continue;
        const req *p = &R[r->fork_of];
        memcpy(r->tok, p->tok, sizeof(int32_t) * (size_t)p->n_prompt);
        memcpy(r->tok + p->n_prompt, p->gen, sizeof(int32_t) * (size_t)(r->fork_at - 1));
        int n = p->n_prompt + r->fork_at - 1;
        r->tok[n] = (p->gen[r->fork_at - 1] + 1 + (int32_t)(t_rand_u64() % (uint64_t)(V - 1))) % V;
        r->n_prompt = n + 1;
        memcpy(r->plan, p->plan, sizeof(int) * (size_t)p->n_plan);
        r->n_plan = bt_chunks(r->plan, p->n_plan, r->fork_at, 1);
        if (bt_solo(m, n_ctx, r->tok, r->plan, r->n_plan, r->n_gen, r->gen, r->logits)) return -1;
    }
    return 0;
}

/* Starts the requests whose time has come. */
static void start(dp_session *s, req *R, int step) {
    for (int i = 0; i < NREQ; i++) {
        req *r = &R[i];
        if (r->started) continue;
        if (r->fork_of >= 0) {
            const req *p = &R[r->fork_of];
            if (p->n_g < r->fork_at) continue;
            r->seq = dp_seq_fork(s, p->seq);
            CHECKF(r->seq >= 0, "fork: %s", dp_last_error());
            r->pos = r->n_prompt - 1;
            CHECK(dp_seq_pos(s, r->seq) == r->pos);
        } else {
            if (step < r->join) continue;
            r->seq = dp_seq_new(s);
            CHECKF(r->seq >= 0, "dp_seq_new: %s", dp_last_error());
            if (r->reuse_of >= 0) {
                r->pos = dp_seq_reuse_prefix(s, r->seq, r->tok, r->n_prompt);
                CHECKF(r->pos == r->expect_reused, "reused %d positions, want %d", r->pos, r->expect_reused);
                if (r->pos < 0) r->pos = 0;
            }
        }
        r->started = 1;
    }
}

/* One batch: prompt chunks and decode tokens of every running request,
 * entries of different sequences shuffled. Returns the requests left. */
static int batch_step(dp_session *s, dp_model *m, req *R, dp_sampler *greedy, int n_batch) {
    int V = dp_model_get_info(m)->n_vocab;
    dp_batch_entry e[1024];
    int owner[1024], n = 0, left = 0;
    for (int i = 0; i < NREQ; i++) {
        req *r = &R[i];
        if (!r->started || r->done) {
            left += !r->done;
            continue;
        }
        left++;
        int k = r->pos < r->n_prompt ? (r->n_prompt - r->pos < r->chunk ? r->n_prompt - r->pos : r->chunk) : 1;
        if (n + k > n_batch) continue; /* next time */
        for (int j = 0; j < k; j++) {
            int p = r->pos + j;
            int32_t t = p < r->n_prompt ? r->tok[p] : r->bgen[p - r->n_prompt];
            int last = p + 1 >= r->n_prompt;
            e[n] = (dp_batch_entry){.seq = r->seq, .pos = p, .token = t, .logits = last && r->sampler != 2,
                                    .sampler = last && r->sampler ? greedy : NULL};
            owner[n++] = i;
        }
    }
    if (!n) return left; /* the running requests left; the next one has not joined yet */
    /* shuffle, keeping each sequence's entries in order: a random
     * interleaving of the per-sequence lists */
    dp_batch_entry sh[1024];
    int sh_owner[1024], taken[NREQ] = {0}, first[NREQ], count[NREQ] = {0};
    for (int i = n - 1; i >= 0; i--) first[owner[i]] = i;
    for (int i = 0; i < n; i++) count[owner[i]]++;
    for (int k = 0; k < n; k++) {
        int pick = (int)(t_rand_u64() % (uint64_t)(n - k)), i = 0;
        for (;; i++) { /* the pick-th remaining entry, by weight of what each request has left */
            if (taken[i] == count[i]) continue;
            if (pick < count[i] - taken[i]) break;
            pick -= count[i] - taken[i];
        }
        sh[k] = e[first[i] + taken[i]];
        sh_owner[k] = i;
        taken[i]++;
    }
    int32_t out[1024];
    int rc = dp_eval_batch(s, sh, n, out);
    CHECKF(rc == DP_OK, "dp_eval_batch of %d entries: %s", n, dp_last_error());
    if (rc) return 0;
    for (int k = 0; k < n; k++) {
        req *r = &R[sh_owner[k]];
        r->pos++;
        if (!sh[k].logits && !sh[k].sampler) continue;
        const float *l = sh[k].logits ? dp_batch_logits(s, k) : NULL;
        int g = r->n_g, tok = l ? bt_argmax(l, V) : out[k];
        if (!l) CHECKF(dp_batch_logits(s, k) == NULL, "request %d: logits of an entry that did not ask", sh_owner[k]);
        if (l && sh[k].sampler) CHECKF(out[k] == tok, "sampled %d, argmax %d", out[k], tok);
        g_steps++;
        if (l) {
            double d = dp_rel_l2(l, r->logits + (size_t)g * V, (size_t)V);
            g_worst = d > g_worst ? d : g_worst;
            g_identical += d == 0;
            CHECKF(d <= 1e-5, "request %d step %d: logits rel-L2 %g against its solo run", sh_owner[k], g, d);
        } else {
            g_tokens_only++;
        }
        CHECKF(tok == r->gen[g], "request %d step %d: token %d, solo %d", sh_owner[k], g, tok, r->gen[g]);
        r->bgen[r->n_g++] = tok;
        if (r->n_g == r->n_gen) {
            r->done = 1;
            CHECK(dp_seq_free(s, r->seq) == DP_OK);
        }
    }
    return left;
}

static int32_t draw_random(void *user) { return (int32_t)(t_rand_u64() % (uint64_t)*(int *)user); }

typedef struct {
    const int32_t *ids;
    int n, at;
} text_src;

static int32_t draw_text(void *user) {
    text_src *t = user;
    return t->ids[t->at++ % t->n];
}

/* The whole scenario on model m; big: prompts up to 700 (else up to 150). */
static void scenario(dp_model *m, const char *name, int big, const int32_t *text, int n_text) {
    int V = dp_model_get_info(m)->n_vocab, n_ctx = big ? 1024 : 256, n_batch = big ? 600 : 256;
    req R[NREQ];
    text_src src = {text, n_text, n_text ? (int)(t_rand_u64() % (uint64_t)n_text) : 0};
    make_requests(R, big, V, text ? draw_text : draw_random, text ? (void *)&src : (void *)&V);
    g_worst = 0;
    g_identical = g_steps = g_tokens_only = 0;
    if (solo_all(m, R, n_ctx) == 0) {
        dp_session *s = bt_session(m, NREQ, n_ctx, n_batch, 0);
        dp_sampler_params sp;
        dp_sampler_params_default(&sp);
        sp.temp = 0;
        dp_sampler *greedy = dp_sampler_new(&sp, V);
        /* sequence 0 exists from the start: free it, the first dp_seq_new hands it out again */
        CHECK(s && dp_seq_free(s, 0) == DP_OK && dp_seq_pos(s, 0) < 0);
        for (int step = 0; s && step < 200; step++) {
            start(s, R, step);
            if (!batch_step(s, m, R, greedy, n_batch)) break;
        }
        for (int i = 0; i < NREQ; i++) CHECKF(R[i].done, "%s: request %d did not finish", name, i);
        if (s) {
            dp_kv_stats st;
            dp_session_kv_stats(s, &st);
            /* every sequence left: only cached prefix pages remain */
            CHECKF(st.used == 0 && st.cached + st.free == st.n_pages, "%s: %d pages still used", name, st.used);
        }
        dp_sampler_free(greedy);
        dp_session_free(s);
    }
    printf("%s (%s path): %d steps against solo runs (%d of them greedy tokens alone), %d logits identical, worst "
           "logits rel-L2 %.3g\n", name, dp_cpu_act_int() ? "int16" : "f32", g_steps, g_tokens_only, g_identical,
           g_worst);
    for (int i = 0; i < NREQ; i++) {
        free(R[i].tok);
        free(R[i].logits);
    }
}

static void fixtures(void) {
    const char *names[] = {"llama-tiny", "qwen2-tiny", "gemma3-tiny"};
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fixtures/models/%s.gguf", names[i]);
        dp_model *m = dp_model_load(t_src_path(rel));
        CHECKF(m != NULL, "%s: %s", rel, dp_last_error());
        if (!m) continue;
        scenario(m, names[i], 0, NULL, 0);
        dp_model_free(m);
    }
}

static void synthetic(void) {
    const char *types[] = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q6_k", "q4_k_s", "q4_k_m",
                           "q5_k_m"};
    const char *archs[] = {"gemma3", "qwen2", "llama"};
    for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++) {
        const char *arch = archs[i % 3];
        dp_model *m = bt_synth(arch, types[i]);
        if (!m) continue;
        char name[64];
        snprintf(name, sizeof name, "synthetic %s tiny %s", arch, types[i]);
        /* the long prompts on a few; the short scenario on the rest */
        scenario(m, name, i % 4 == 0, NULL, 0);
        dp_model_free(m);
    }
}

static void real_model(const char *file) {
    dp_model *m = t_load_cached_model(file);
    if (!m) return;
    size_t len = 0;
    char *text = t_read_file(t_src_path("tests/fixtures/tokenizer/corpus_lines.txt"), &len);
    CHECK(text != NULL);
    int cap = (int)len + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n = text ? dp_tokenize(m, text, len, 0, 0, ids, cap) : 0;
    CHECKF(n > 2000, "corpus: %d tokens", n);
    if (n > 2000) scenario(m, file, 1, ids, n);
    free(ids);
    free(text);
    dp_model_free(m);
}

int main(void) {
    t_seed();
    fixtures();
    synthetic();
    real_model("gemma-3-270m-q4_k_m.gguf");
    /* the float path of the one-position matmuls too, on the fixtures */
    dp_cpu_act_force(0);
    fixtures();
    return t_done("test_batch");
}

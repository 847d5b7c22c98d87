/* Constrained draws inside dp_eval_batch (dp_batch_entry.constraint), on
 * the CPU and, where there is one, on the GPU (whose device sampler masks
 * the logits with the constraint's bits): each constrained sequence has a
 * twin with the same tokens whose logits come back, and the engine's token
 * must equal what dp_constraint_sample draws from the twin's logits with a
 * twin sampler and constraint. Greedy, truncated and untruncated draws, a
 * repetition penalty; a prompt's last row, batched decode rows (two plain
 * greedy ones among them) and single rows (the GPU's one-row graph); a
 * constrained row that also keeps its logits gets them unmasked. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_probe.h"
#include "doppler.h"
#include "testlib.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"n\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bc\",\"def\"]},"
    "\"maxItems\":3}},\"required\":[\"name\",\"n\",\"tags\"]}";

enum { N_PAIRS = 8, MAX_STEPS = 120, PROMPT_MAX = 24 };

typedef struct {
    int seq, twin;            /* the engine draws for seq; twin's logits come back */
    dp_sampler *smp, *smp_twin;
    dp_constraint *c, *c_twin;
    int32_t prompt[PROMPT_MAX];
    int n_prompt, alive, steps, mism, keep;
    int32_t next;             /* the token both take next */
    char text[1024];
    size_t tl;
} pair;

typedef struct {
    dp_session *s;
    dp_model *m;
    int V;
    float *work;
    dp_batch_entry e[2 * N_PAIRS * PROMPT_MAX];
    int32_t out[2 * N_PAIRS * PROMPT_MAX];
    int at[N_PAIRS][2];       /* each pair's entries with a draw or logits in its last call */
} ctx;

static void set_params(dp_sampler_params *p, int i) {
    dp_sampler_params_default(p);
    p->seed = t_rand_u64();
    switch (i) {
    case 0: p->temp = 0; break;                                                  /* greedy, single rows */
    case 1: break;                                                               /* the defaults: top-k 40 ... */
    case 2: p->temp = 1.0f, p->top_k = 5, p->top_p = 1, p->min_p = 0, p->repeat_penalty = 1.3f; break;
    case 3: p->temp = 0, p->repeat_penalty = 1.2f; break;                        /* greedy with a penalty */
    case 4: p->temp = 0.7f, p->top_k = 0, p->top_p = 1, p->min_p = 0; break;     /* untruncated: the host draws */
    case 5: p->temp = 1.2f, p->top_k = 200, p->top_p = 0.9f, p->min_p = 0; break;
    default: p->temp = 0; break; /* plain greedy rows in a batch: the CPU's screened LM head would take them */
    }
}

/* Adds pair P's rows (sides: 1 the engine's sequence, 2 the twin, 3 both):
 * its next token, or its prompt (first). */
static int add_rows(ctx *x, int n, pair *P, int pi, int first, int sides) {
    const int32_t *toks = first ? P->prompt : &P->next;
    const int cnt = first ? P->n_prompt : 1;
    for (int side = 0; side < 2; side++) {
        if (!(sides & (1 << side))) continue;
        const int seq = side ? P->twin : P->seq, pos = dp_seq_pos(x->s, seq);
        for (int k = 0; k < cnt; k++) {
            const int last = k == cnt - 1;
            x->e[n] = (dp_batch_entry){.seq = seq, .pos = pos + k, .token = toks[k]};
            if (last && !side) {
                x->e[n].sampler = P->smp, x->e[n].constraint = P->c, x->e[n].logits = P->keep;
            } else if (last) {
                x->e[n].logits = 1;
            }
            if (last) x->at[pi][side] = n;
            n++;
        }
    }
    return n;
}

/* After the calls: pair P's engine token got against the twin's draw (the
 * twin's logits are entry at[pi][1] of the last call); both take it. */
static void settle(ctx *x, pair *P, int pi, int32_t got, const char *what) {
    memcpy(x->work, dp_batch_logits(x->s, x->at[pi][1]), sizeof(float) * (size_t)x->V);
    const int32_t want = dp_constraint_sample(P->c_twin, P->smp_twin, x->work, x->V);
    if (got != want && P->mism++ < 3)
        CHECKF(0, "%s pair %d step %d: the engine drew %d, the twin's logits give %d", what, pi, P->steps, got, want);
    if (P->keep) { /* a kept row comes back as the model wrote it */
        const float *kept = dp_batch_logits(x->s, x->at[pi][0]);
        int inf = 0;
        for (int t = 0; kept && t < x->V; t++) inf += isinf(kept[t]);
        CHECKF(kept && !inf, "%s pair %d: the kept logits hold %d -inf", what, pi, inf);
    }
    P->steps++;
    if (got < 0 || got >= x->V) {
        CHECKF(0, "%s pair %d: token %d", what, pi, got);
        P->alive = 0;
        return;
    }
    dp_sampler_accept(P->smp, got);
    dp_sampler_accept(P->smp_twin, got);
    CHECK(dp_constraint_accept(P->c, got) == DP_OK && dp_constraint_accept(P->c_twin, got) == DP_OK);
    P->next = got;
    if (dp_token_is_eog(x->m, got) || dp_constraint_done(P->c) || P->steps >= MAX_STEPS) P->alive = 0;
    if (dp_token_is_eog(x->m, got)) return;
    char buf[64];
    const int nb = dp_token_to_bytes(x->m, got, 0, buf, sizeof buf);
    if (nb > 0 && P->tl + (size_t)nb < sizeof P->text) memcpy(P->text + P->tl, buf, (size_t)nb), P->tl += (size_t)nb;
}

static int call(ctx *x, int n, const char *what) {
    const int rc = dp_eval_batch(x->s, x->e, n, x->out);
    CHECKF(rc == DP_OK, "%s: dp_eval_batch: %s", what, dp_last_error());
    return rc;
}

static void run(dp_backend backend, const char *arch, const char *type) {
    char what[96];
    snprintf(what, sizeof what, "%s %s %s", backend == DP_BACKEND_CUDA ? "cuda" : "cpu", arch, type);
    const char *path = t_tmp_path(".gguf");
    dp_synth_params sp = {.arch = arch, .preset = "tiny", .type = type, .seed = t_rand_u64()};
    CHECKF(dp_synth(&sp, path) == DP_OK, "synth: %s", dp_last_error());
    ctx x = {.m = dp_model_load(path)};
    remove(path);
    CHECKF(x.m != NULL, "%s: %s", what, dp_last_error());
    if (!x.m) return;
    x.V = dp_model_get_info(x.m)->n_vocab;
    dp_session_params ps;
    dp_session_params_default(&ps);
    ps.backend = backend, ps.n_ctx = 256, ps.n_seq_max = 2 * N_PAIRS + 1; /* sequence 0 is alive from the start */
    x.s = dp_session_new(x.m, &ps);
    CHECKF(x.s != NULL, "%s: session: %s", what, dp_last_error());
    x.work = malloc(sizeof(float) * (size_t)x.V);
    pair P[N_PAIRS];
    memset(P, 0, sizeof P);
    for (int i = 0; x.s && i < N_PAIRS; i++) {
        dp_sampler_params p;
        set_params(&p, i);
        P[i].smp = dp_sampler_new(&p, x.V), P[i].smp_twin = dp_sampler_new(&p, x.V);
        P[i].c = dp_constraint_json(x.m, SCHEMA, strlen(SCHEMA), DP_THINK_NONE);
        P[i].c_twin = dp_constraint_json(x.m, SCHEMA, strlen(SCHEMA), DP_THINK_NONE);
        P[i].seq = dp_seq_new(x.s), P[i].twin = dp_seq_new(x.s);
        CHECKF(P[i].smp && P[i].smp_twin && P[i].c && P[i].c_twin && P[i].seq >= 0 && P[i].twin >= 0, "%s: %s", what,
               dp_last_error());
        P[i].n_prompt = t_rand_int(4, PROMPT_MAX);
        for (int k = 0; k < P[i].n_prompt; k++) P[i].prompt[k] = (int32_t)t_rand_int(0, x.V - 1);
        P[i].keep = i == 5;
        P[i].alive = 1;
    }
    /* pair 0 alone in every call (the prompt, then single decode rows);
     * the others together (their prompts, then batched decode rows) */
    for (int step = 0; x.s && step <= MAX_STEPS; step++) {
        int any = 0;
        for (int i = 0; i < N_PAIRS; i++) any |= P[i].alive;
        if (!any) break;
        if (P[0].alive) { /* the engine's row, then the twin's, each alone */
            if (call(&x, add_rows(&x, 0, &P[0], 0, step == 0, 1), what)) goto done;
            const int32_t got = x.out[x.at[0][0]];
            if (call(&x, add_rows(&x, 0, &P[0], 0, step == 0, 2), what)) goto done;
            settle(&x, &P[0], 0, got, what);
        }
        int n = 0;
        for (int i = 1; i < N_PAIRS; i++)
            if (P[i].alive) n = add_rows(&x, n, &P[i], i, step == 0, 3);
        if (n && call(&x, n, what)) goto done;
        for (int i = 1; i < N_PAIRS; i++)
            if (P[i].alive) settle(&x, &P[i], i, x.out[x.at[i][0]], what);
    }
    for (int i = 0; x.s && i < N_PAIRS; i++) {
        CHECKF(P[i].mism == 0, "%s pair %d: %d of %d tokens differ from the twin's", what, i, P[i].mism, P[i].steps);
        P[i].text[P[i].tl] = 0;
        if (dp_constraint_done(P[i].c)) {
            cJSON *j = cJSON_Parse(P[i].text);
            CHECKF(j != NULL, "%s pair %d: the finished answer does not parse: %s", what, i, P[i].text);
            cJSON_Delete(j);
        }
        printf("%s pair %d: %d tokens, %s: %s\n", what, i, P[i].steps, dp_constraint_done(P[i].c) ? "done" : "open",
               P[i].text);
    }
done:
    for (int i = 0; i < N_PAIRS; i++) {
        dp_sampler_free(P[i].smp), dp_sampler_free(P[i].smp_twin);
        dp_constraint_free(P[i].c), dp_constraint_free(P[i].c_twin);
    }
    free(x.work);
    dp_session_free(x.s);
    dp_model_free(x.m);
}

/* A constraint without a sampler is refused, nothing evaluated. */
static void refusals(void) {
    const char *path = t_tmp_path(".gguf");
    dp_synth_params sp = {.arch = "qwen2", .preset = "tiny", .type = "f32", .seed = t_rand_u64()};
    CHECKF(dp_synth(&sp, path) == DP_OK, "synth: %s", dp_last_error());
    dp_model *m = dp_model_load(path);
    remove(path);
    dp_session_params ps;
    dp_session_params_default(&ps);
    ps.backend = DP_BACKEND_CPU;
    dp_session *s = m ? dp_session_new(m, &ps) : NULL;
    dp_constraint *c = m ? dp_constraint_json(m, NULL, 0, DP_THINK_NONE) : NULL;
    CHECK(s && c);
    if (s && c) {
        dp_batch_entry e = {.seq = 0, .pos = 0, .token = 1, .logits = 1, .constraint = c};
        int32_t out = 0;
        CHECK(dp_eval_batch(s, &e, 1, &out) == DP_ERR_ARG && strstr(dp_last_error(), "constraint but no sampler"));
        CHECK(dp_seq_pos(s, 0) == 0);
    }
    dp_constraint_free(c);
    dp_session_free(s);
    dp_model_free(m);
}

int main(void) {
    refusals();
    run(DP_BACKEND_CPU, "qwen2", "q8_0");
    run(DP_BACKEND_CPU, "gemma3", "q4_k_m");
    char why[512];
    dp_model *pm = NULL;
    dp_session *probe = t_cuda_probe(t_seed(), &pm, why, sizeof why);
    if (!probe) {
        printf("CUDA part skipped: %s\n", why);
    } else {
        dp_session_free(probe);
        run(DP_BACKEND_CUDA, "qwen2", "q8_0");
        run(DP_BACKEND_CUDA, "gemma3", "q4_k_m");
        run(DP_BACKEND_CUDA, "qwen3", "iq4_xs");
    }
    dp_model_free(pm);
    return t_done("test_batch_constrain");
}

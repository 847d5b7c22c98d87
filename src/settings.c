/* The settings table: every DOPPLER_* environment switch of the library,
 * with its default, its allowed values and what it does (settings.h). */
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

extern char **environ;

typedef enum {
    SET_INT,  /* an integer in [lo, hi] */
    SET_WORD, /* one of words ('|'-separated), stored as lo + its index */
    SET_LIST, /* comma-separated words, stored as a bit mask */
    SET_TEXT, /* kept as written (checked where it is used) */
} set_kind;

typedef struct {
    const char *name;
    set_kind kind;
    unsigned scope;
    size_t offset;
    int def, lo, hi;
    const char *words;
    const char *meaning;
} set_entry;

#define AT(field) offsetof(dp_settings, field)

static const set_entry g_table[] = {
    {"DOPPLER_FAULT", SET_TEXT, DP_SET_MODEL, AT(fault), 0, 0, 0, NULL,
     "inject known bugs into loaded models, for the debugging toolkit (comma-separated names, docs/debugging.md)"},
    {"DOPPLER_NO_CUDA", SET_INT, DP_SET_SESSION, AT(no_cuda), 0, 0, 1, NULL,
     "1: sessions do not use the GPU (as if none were present)"},
    {"DOPPLER_CPU", SET_WORD, DP_SET_CPU, AT(cpu_level), -1, -1, 2, "auto|scalar|avx2|avx512",
     "CPU kernel level, at most what the CPU supports (auto: the best it supports)"},
    {"DOPPLER_CPU_ACT", SET_WORD, DP_SET_CPU, AT(cpu_act), -1, -1, 1, "auto|f32|int16",
     "activations of CPU matmuls: decode, and prompts with VNNI (auto: int16 where SIMD kernels exist)"},
    {"DOPPLER_CUDA_PDL", SET_INT, DP_SET_CUDA, AT(cuda_pdl), 1, 0, 1, NULL,
     "programmatic dependent launch between decode kernels (0: each kernel starts after the previous one ends)"},
    {"DOPPLER_CUDA_ATTN_SLICE_KEYS", SET_INT, DP_SET_CUDA, AT(attn_slice_keys), 64, 1, 65536, NULL,
     "keys per slice of decode attention once a context is split"},
    {"DOPPLER_CUDA_ATTN_ONE_SLICE", SET_INT, DP_SET_CUDA, AT(attn_one_slice), 128, 1, 1 << 20, NULL,
     "most keys of a decode step whose attention takes one slice, a CTA per query head (head dimension 256: half "
     "as many)"},
    {"DOPPLER_CUDA_ATTN_GQA_MUL", SET_INT, DP_SET_CUDA, AT(gqa_mul), 4, 1, 8, NULL,
     "k_attn_gqa's slices per KV head, as a multiple of k_attn_split's per query head (at most the query heads a "
     "KV head)"},
    {"DOPPLER_CUDA_ATTN_GQA_MINK", SET_INT, DP_SET_CUDA, AT(gqa_min_keys), 32, 1, 1 << 20, NULL,
     "fewest keys per k_attn_gqa slice"},
    {"DOPPLER_CUDA_ATTN_GQA_SPIN", SET_INT, DP_SET_CUDA, AT(gqa_spin), 1, 0, 1, NULL,
     "k_attn_gqa's slices wait for each other and combine together (0: the last one combines; use 0 under MPS)"},
    {"DOPPLER_CUDA_MVW_PAIRS", SET_INT, DP_SET_CUDA, AT(mvw_pairs), 32, 32, 1024, NULL,
     "(row, unit) pairs per warp group of the integer decode matvec k_matvec_w"},
    {"DOPPLER_CUDA_MVW_LANES", SET_WORD, DP_SET_CUDA, AT(mvw_lanes), DP_MVW_AUTO, 0, DP_MVW_32X2,
     "auto|w|4|8|16|32|4x2|8x2|16x2|32x2",
     "shape of the integer decode matvec: k_matvec_l with 4, 8, 16 or 32 lanes per row (x2: two units per lane at "
     "a time) wherever a launch can, w: k_matvec_w everywhere, auto: 8x2 where w would take more than one round of "
     "rows and leave lanes idle or rows of more than 32 units"},
    {"DOPPLER_CUDA_F16_WEIGHTS", SET_INT, DP_SET_CUDA, AT(f16_weights), 1, 0, 1, NULL,
     "1: keep an f16 copy of the quantised matrices when they fit in half the free device memory (GEMMs for "
     "prefill and batched steps); 0: never (prefill dequantises each matrix as it goes)"},
    {"DOPPLER_CUDA_F16_ROWS", SET_INT, DP_SET_CUDA, AT(f16_rows), 8, 2, 1 << 20, NULL,
     "fewest rows of a pass that use the f16 copy's GEMMs (fewer: k_mmv); a session of one sequence takes at least 16"},
    {"DOPPLER_CUDA_F16_ROWS_K", SET_INT, DP_SET_CUDA, AT(f16_rows_k), 9, 2, 1 << 20, NULL,
     "the same for matrices that k_mmv multiplies with exact weights (Q3_K to Q6_K, up to 16 rows): more rows "
     "stay on k_mmv, at least DOPPLER_CUDA_F16_ROWS"},
    {"DOPPLER_CUDA_F16_LM_ROWS", SET_INT, DP_SET_CUDA, AT(f16_lm_rows), 32, 2, 1 << 20, NULL,
     "fewest rows whose LM head uses the f16 copy's GEMM (fewer: k_mmv, which reads the quantised head)"},
    {"DOPPLER_CUDA_ATTN_SPLIT_KEYS", SET_INT, DP_SET_CUDA, AT(attn_split_keys), 64, 8, 65536, NULL,
     "fewest keys per split of k_attention in passes of several rows (batched decode steps, prefill); passes of "
     "at most 32 (row, KV head) pairs take a quarter of it"},
    {"DOPPLER_CUDA_ATTN_ROWS_KEYS", SET_INT, DP_SET_CUDA, AT(attn_rows_keys), 512, 0, 1 << 20, NULL,
     "most keys of a batched decode step whose attention (decode rows of at most 32 (row, KV head) pairs) takes a "
     "CTA per row and query head, each reading its row's keys from L2 (k_attn_split); longer contexts split the "
     "keys per KV head (k_attention)"},
    {"DOPPLER_CUDA_GEMM_BUCKETS", SET_INT, DP_SET_CUDA, AT(gemm_buckets), 1, 0, 1, NULL,
     "1: GEMMs on the f16 copies compute rows padded to a few sizes, each run once at session start (no "
     "first-use cost for a prompt of a new length); 0: the rows as they come"},
    {"DOPPLER_CUDA_SPLIT_K", SET_INT, DP_SET_CUDA, AT(split_k), 2, 1, 8, NULL,
     "k-parts of the Q/K/V, o and down GEMMs of a batched session's passes of at most 32 rows: one strided-batched "
     "product whose "
     "partial sums the RoPE kernel and the next RMSNorm add (more CTAs, no reduction launch); 1: one product"},
    {"DOPPLER_CUDA_BATCH_FUSE", SET_INT, DP_SET_CUDA, AT(batch_fuse), 1, 0, 1, NULL,
     "1: GEMM passes multiply Q/K/V and gate/up as one product each, biases added in the RoPE kernel (a session of "
     "one sequence traced or not, a batched session untraced); 0: one product per matrix"},
#ifdef DOPPLER_CUDA_LAB
    {"DOPPLER_CUDA_SKIP", SET_LIST, DP_SET_CUDA, AT(lab_skip), 0, 0, 0, "qkv|attn|o|gu|down",
     "lab builds: decode launches left out of the graph, to see what each costs (the output is meaningless)"},
#endif
};
enum { N_SETTINGS = (int)(sizeof g_table / sizeof g_table[0]) };

const char *dp_setting_name(int i) { return i >= 0 && i < N_SETTINGS ? g_table[i].name : NULL; }
const char *dp_setting_meaning(int i) { return i >= 0 && i < N_SETTINGS ? g_table[i].meaning : NULL; }

/* Index of the word of length n at w in the '|'-separated list, or -1. */
static int word_index(const char *words, const char *w, size_t n) {
    int i = 0;
    for (const char *p = words; *p; i++) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, w, n) == 0) return i;
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

/* The words as "a, b, c" for a message. */
static void word_list(const char *words, char *buf, size_t cap) {
    size_t j = 0;
    for (const char *p = words; *p && j + 3 < cap; p++) {
        if (*p == '|') {
            buf[j++] = ',';
            buf[j++] = ' ';
        } else {
            buf[j++] = *p;
        }
    }
    buf[j] = 0;
}

static int parse(const set_entry *e, const char *v, void *field) {
    char list[128];
    switch (e->kind) {
    case SET_INT: {
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < e->lo || x > e->hi)
            return dp_set_error(DP_ERR_ARG, "%s='%s' is not an integer in [%d, %d]", e->name, v, e->lo, e->hi);
        *(int *)field = (int)x;
        return DP_OK;
    }
    case SET_WORD: {
        int i = word_index(e->words, v, strlen(v));
        word_list(e->words, list, sizeof list);
        if (i < 0) return dp_set_error(DP_ERR_ARG, "%s='%s' is not one of %s", e->name, v, list);
        *(int *)field = e->lo + i;
        return DP_OK;
    }
    case SET_LIST: {
        int mask = 0;
        for (const char *p = v; *p;) {
            const char *c = strchr(p, ',');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            int i = word_index(e->words, p, n);
            word_list(e->words, list, sizeof list);
            if (i < 0) return dp_set_error(DP_ERR_ARG, "%s: '%.*s' is not one of %s", e->name, (int)n, p, list);
            mask |= 1 << i;
            p += n + (c != NULL);
        }
        *(int *)field = mask;
        return DP_OK;
    }
    case SET_TEXT:
        if (strlen(v) >= sizeof((dp_settings *)0)->fault)
            return dp_set_error(DP_ERR_ARG, "%s is longer than %zu characters", e->name,
                                sizeof((dp_settings *)0)->fault - 1);
        snprintf((char *)field, sizeof((dp_settings *)0)->fault, "%s", v);
        return DP_OK;
    }
    return DP_OK;
}

/* A DOPPLER_CUDA_* variable that no entry names: probably a typo, or a
 * switch that was removed (its path lost its measurements). */
static int check_unknown(void) {
    static const char prefix[] = "DOPPLER_CUDA_";
    for (char **ev = environ; ev && *ev; ev++) {
        if (strncmp(*ev, prefix, sizeof prefix - 1)) continue;
        const char *eq = strchr(*ev, '=');
        size_t n = eq ? (size_t)(eq - *ev) : strlen(*ev);
        int known = 0;
        for (int i = 0; i < N_SETTINGS && !known; i++)
            known = strlen(g_table[i].name) == n && !strncmp(g_table[i].name, *ev, n);
        if (known) continue;
        if (n == 17 && !strncmp(*ev, "DOPPLER_CUDA_SKIP", n))
            return dp_set_error(DP_ERR_ARG, "DOPPLER_CUDA_SKIP is a lab setting: configure with -DDOPPLER_CUDA_LAB=ON");
        return dp_set_error(DP_ERR_ARG, "%.*s is not a doppler setting (docs/cuda.md lists the DOPPLER_CUDA_* ones)",
                            (int)n, *ev);
    }
    return DP_OK;
}

int dp_settings_read(dp_settings *out, unsigned scopes) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < N_SETTINGS; i++)
        if (g_table[i].kind != SET_TEXT) *(int *)((char *)out + g_table[i].offset) = g_table[i].def;
    int rc = DP_OK;
    for (int i = 0; i < N_SETTINGS && !rc; i++) {
        const char *v = (g_table[i].scope & scopes) ? getenv(g_table[i].name) : NULL;
        if (v && *v) rc = parse(&g_table[i], v, (char *)out + g_table[i].offset);
    }
    return rc || !(scopes & DP_SET_CUDA) ? rc : check_unknown();
}

void dp_settings_describe(const dp_settings *s, unsigned scopes, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < N_SETTINGS && n < cap; i++) {
        const set_entry *e = &g_table[i];
        if (!(e->scope & scopes)) continue;
        const void *f = (const char *)s + e->offset;
        const char *sep = n ? " " : "";
        if (e->kind == SET_TEXT) {
            n += (size_t)snprintf(buf + n, cap - n, "%s%s=%s", sep, e->name, *(const char *)f ? (const char *)f : "\"\"");
        } else if (e->kind == SET_WORD) {
            char w[32];
            const char *p = e->words;
            for (int k = *(const int *)f - e->lo; k > 0 && strchr(p, '|'); k--) p = strchr(p, '|') + 1;
            snprintf(w, sizeof w, "%.*s", (int)(strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p)), p);
            n += (size_t)snprintf(buf + n, cap - n, "%s%s=%s", sep, e->name, w);
        } else {
            n += (size_t)snprintf(buf + n, cap - n, "%s%s=%d", sep, e->name, *(const int *)f);
        }
    }
}

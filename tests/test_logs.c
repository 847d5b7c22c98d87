/* Tagged logs: [Kernel], [KV] and [FFN] print what the library reports, with
 * numbers checked against the GGUF metadata read independently (gguf.c):
 * KV bytes per token = 2 x layers x kv heads x head dim x 4 (f32 on the CPU;
 * 2 with -ctk f16, and on CUDA), total = n_ctx x that; the [KV] fill follows the prompt and the generated
 * tokens; [FFN] has one line per selected layer and step whose act numbers
 * equal the [Layer] statistics of the act point; --log-tags KV shows only
 * [KV]; tags off by default stay silent. Tiny synthetic models always, the
 * real models when cached, the GPU when there is one. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "doppler.h"
#include "gguf.h"
#include "testlib.h"

typedef struct {
    int n_layer, n_head_kv, head_dim, n_ff, n_embd;
    char act[16];
} meta;

static int read_meta(const char *path, meta *m) {
    gguf_file *f = gguf_open(path);
    if (!f) return -1;
    gguf_str a;
    char arch[32] = "", key[96];
    if (gguf_get_str(f, "general.architecture", &a)) snprintf(arch, sizeof arch, "%.*s", (int)a.len, a.ptr);
    int64_t v[6] = {0};
    const char *keys[6] = {"block_count", "attention.head_count_kv", "attention.key_length", "feed_forward_length",
                           "embedding_length", "attention.head_count"};
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, keys[i]);
        gguf_get_int(f, key, &v[i]);
    }
    gguf_close(f);
    m->n_layer = (int)v[0];
    m->n_head_kv = (int)(v[1] ? v[1] : v[5]);
    m->head_dim = (int)(v[2] ? v[2] : v[5] ? v[4] / v[5] : 0);
    m->n_ff = (int)v[3];
    m->n_embd = (int)v[4];
    /* Gemma's gated FFN uses GELU (tanh form); Llama and Qwen2 use SiLU */
    snprintf(m->act, sizeof m->act, "%s", !strncmp(arch, "gemma", 5) ? "gelu-tanh" : "silu");
    return m->n_layer > 0 && m->n_head_kv > 0 && m->head_dim > 0 ? 0 : -1;
}

/* The n-th line (0-based) of text that starts with prefix, copied into buf. */
static const char *nth_line(const char *text, const char *prefix, int n, char *buf, size_t cap) {
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len >= pl && !strncmp(p, prefix, pl) && n-- == 0) {
            snprintf(buf, cap, "%.*s", (int)len, p);
            return buf;
        }
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

static int count_lines(const char *text, const char *prefix) {
    char buf[4096];
    int n = 0;
    while (nth_line(text, prefix, n, buf, sizeof buf)) n++;
    return n;
}

/* Lines of stderr that start with "[" but not with one of the allowed tags. */
static int lines_outside(const char *err, const char *const *tags, int n_tags) {
    int bad = 0;
    for (const char *p = err; p && *p;) {
        const char *e = strchr(p, '\n');
        if (*p == '[') {
            int ok = 0;
            for (int i = 0; i < n_tags; i++) ok |= !strncmp(p, tags[i], strlen(tags[i]));
            if (!ok) {
                bad++;
                fprintf(stderr, "unexpected line: %.*s\n", (int)(e ? e - p : (long)strlen(p)), p);
            }
        }
        p = e ? e + 1 : NULL;
    }
    return bad;
}

typedef struct {
    double min, max, mean, rms, max_abs;
    int at, nan, inf;
} vstats;

/* Parses "min=.. max=.. mean=.. rms=.. maxAbs=..@i nan=.. inf=.." at s. */
static int parse_stats(const char *s, vstats *v) {
    return s && sscanf(s, "min=%lg max=%lg mean=%lg rms=%lg maxAbs=%lg@%d nan=%d inf=%d", &v->min, &v->max, &v->mean,
                       &v->rms, &v->max_abs, &v->at, &v->nan, &v->inf) == 8;
}

static void check_plausible(const vstats *v, int dim, const char *what) {
    CHECKF(isfinite(v->min) && isfinite(v->max) && v->min <= v->mean && v->mean <= v->max, "%s: min %g mean %g max %g",
           what, v->min, v->mean, v->max);
    CHECKF(v->rms > 0 && v->rms <= v->max_abs * (1 + 1e-5), "%s: rms %g maxAbs %g", what, v->rms, v->max_abs);
    CHECKF(fabs(v->max_abs - fmax(fabs(v->min), fabs(v->max))) <= 1e-5 * v->max_abs, "%s: maxAbs %g vs min %g max %g",
           what, v->max_abs, v->min, v->max);
    CHECKF(v->at >= 0 && v->at < dim && v->nan == 0 && v->inf == 0, "%s: at %d nan %d inf %d", what, v->at, v->nan,
           v->inf);
}

/* [KV] cache line: n_ctx, type, bytes and pages against the metadata. Both
 * backends allocate the page pool (one sequence: n_ctx rounded up to whole
 * pages; 16 positions on the CPU, 64 on CUDA). */
/* ps: the backend's page size (CPU 16, CUDA 64) */
static void check_kv_cache(const char *err, const meta *mt, int n_ctx, const char *type, int elem, int want_ps) {
    char line[4096], t[16] = "";
    int c = 0, pages = 0, ps = 0, seqs = 0;
    unsigned long long per = 0, total = 0;
    CHECKF(nth_line(err, "[KV] cache ", 0, line, sizeof line) &&
               sscanf(line, "[KV] cache n_ctx=%d type=%15s bytes_per_token=%llu bytes=%llu", &c, t, &per, &total) == 4,
           "no [KV] cache line: %s", err);
    const char *pg = strstr(line, " pages=");
    CHECKF(pg && sscanf(pg, " pages=%d page_size=%d n_seq_max=%d", &pages, &ps, &seqs) == 3, "no pages in %s", line);
    unsigned long long want = 2ull * mt->n_layer * mt->n_head_kv * mt->head_dim * elem;
    CHECKF(c == n_ctx, "n_ctx %d, want %d", c, n_ctx);
    CHECKF(!strcmp(t, type), "KV type %s, want %s", t, type);
    CHECKF(per == want, "bytes per token %llu, want %llu", per, want);
    CHECKF(seqs == 1 && ps > 0 && pages == (n_ctx + ps - 1) / ps, "%d pages of %d for %d sequence(s), n_ctx %d", pages,
           ps, seqs, n_ctx);
    CHECKF(ps == want_ps, "page size %d, want %d", ps, want_ps);
    unsigned long long positions = (unsigned long long)pages * ps;
    CHECKF(total == positions * want, "KV bytes %llu, want %llu x %llu", total, positions, want);
}

/* [KV] fill line "<when>: pos/n_ctx positions used ...; pages used=U ...":
 * one sequence holds its positions in whole pages (of the page_size the
 * [KV] cache line gives: the backend's). */
static int kv_fill(const char *err, const char *when, int *n_ctx) {
    char line[4096], pre[96];
    snprintf(pre, sizeof pre, "[KV] %s: ", when);
    int pos = -1, used = -1, shared = -1, cached = -1, free_p = -1, ps = 0;
    if (!nth_line(err, pre, 0, line, sizeof line) || sscanf(line + strlen(pre), "%d/%d positions used", &pos, n_ctx) != 2)
        return -1;
    char cl[4096];
    const char *at = nth_line(err, "[KV] cache ", 0, cl, sizeof cl) ? strstr(cl, " page_size=") : NULL;
    CHECKF(at && sscanf(at, " page_size=%d", &ps) == 1 && ps > 0, "no page size in the [KV] cache line: %s", err);
    if (ps <= 0) return -1;
    const char *pg = strstr(line, "pages used=");
    CHECKF(pg && sscanf(pg, "pages used=%d shared=%d cached=%d free=%d", &used, &shared, &cached, &free_p) == 4 &&
               used == (pos + ps - 1) / ps && shared == 0 && used + cached + free_p == (*n_ctx + ps - 1) / ps,
           "pages in %s", line);
    return pos;
}

static int prompt_tokens(const char *err) {
    char line[4096];
    const char *p = nth_line(err, "[Stats] prompt ", 0, line, sizeof line);
    return p ? atoi(p + strlen("[Stats] prompt ")) : -1;
}

static int known_level(const char *s) { return !strcmp(s, "scalar") || !strcmp(s, "avx2") || !strcmp(s, "avx512"); }

/* run on the CPU with every tag, --debug on two layers and act/down also as
 * [Layer] points: each [FFN] act/down pair equals those lines. */
static void check_cpu_run(const char *path, const meta *mt, const char *prompt) {
    int n_ctx = 64 + (int)(t_rand_u64() % 200), threads = 1 + (int)(t_rand_u64() % 2), n_gen = 3;
    int l1 = mt->n_layer - 1;
    char args[2048], *out = NULL, *err = NULL, line[4096], want[96];
    snprintf(args, sizeof args,
             "run -m '%s' -p '%s' -n %d --temp 0 --ignore-eos --ctx %d -t %d --backend cpu --verbose --debug "
             "--debug-layers 0,%d --debug-points act,down",
             path, prompt, n_gen, n_ctx, threads, l1);
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "%s: exit %d: %s", args, rc, err);
    if (rc) goto done;
    /* [Kernel] */
    char level[32] = "", best[32] = "";
    int th = 0;
    CHECKF(nth_line(err, "[Kernel] backend=cpu ", 0, line, sizeof line) &&
               sscanf(line, "[Kernel] backend=cpu level=%31s (this CPU supports up to %31[a-z0-9]) threads=%d", level,
                      best, &th) == 3,
           "no [Kernel] backend line: %s", err);
    CHECKF(known_level(level) && known_level(best), "levels '%s' '%s'", level, best);
    CHECKF(th == threads, "threads %d, want %d", th, threads);
    snprintf(want, sizeof want, "[Kernel] ffn act=%s: fused into the gate/up matmul (%s ", mt->act, level);
    CHECKF(nth_line(err, want, 0, line, sizeof line), "no '%s': %s", want, err);
    /* the settings of the table (src/settings.c) this session was made with: the CPU's, no CUDA ones */
    CHECKF(nth_line(err, "[Kernel] settings: ", 0, line, sizeof line) && strstr(line, "DOPPLER_CPU=auto") &&
               strstr(line, "DOPPLER_CPU_ACT=auto") && strstr(line, "DOPPLER_NO_CUDA=0") && !strstr(line, "DOPPLER_CUDA_"),
           "settings line: %s", err);
    /* [KV] */
    check_kv_cache(err, mt, n_ctx, "f32", 4, 16);
    int P = prompt_tokens(err), c1 = 0, c2 = 0;
    CHECKF(P > 0, "no prompt token count: %s", err);
    /* after prefill: the prompt; at end: plus every generated token but the last */
    CHECKF(kv_fill(err, "after prefill", &c1) == P && c1 == n_ctx, "after prefill: want %d/%d: %s", P, n_ctx, err);
    CHECKF(kv_fill(err, "at end", &c2) == P + n_gen - 1 && c2 == n_ctx, "at end: want %d/%d", P + n_gen - 1, n_ctx);
    /* [FFN]: layers 0 and l1, one line per step (last prompt position, then each decode step) */
    int n_ffn = count_lines(err, "[FFN] ");
    CHECKF(n_ffn == 2 * n_gen, "%d [FFN] lines, want %d", n_ffn, 2 * n_gen);
    for (int i = 0; i < n_ffn; i++) {
        nth_line(err, "[FFN] ", i, line, sizeof line);
        int L = -1, seq = -1, pos = -1, nff = 0, nd = 0;
        char act[32] = "";
        vstats a, d;
        const char *pa = strstr(line, " act: "), *pd = strstr(line, " | down: n=");
        CHECKF(sscanf(line, "[FFN] L=%d seq=%d pos=%d act=%31s n_ff=%d", &L, &seq, &pos, act, &nff) == 5 && seq == 0 &&
                   pa && pd &&
                   parse_stats(pa + 6, &a) && sscanf(pd + 11, "%d", &nd) == 1 && parse_stats(strchr(pd + 11, ' ') + 1, &d),
               "bad [FFN] line: %s", line);
        CHECKF(L == (i % 2 ? l1 : 0), "[FFN] line %d: layer %d", i, L);
        CHECKF(pos == P - 1 + i / 2, "[FFN] line %d: pos %d, want %d", i, pos, P - 1 + i / 2);
        CHECKF(!strcmp(act, mt->act) && nff == mt->n_ff && nd == mt->n_embd, "[FFN] act %s n_ff %d n %d", act, nff, nd);
        check_plausible(&a, mt->n_ff, "act");
        check_plausible(&d, mt->n_embd, "down");
        /* the same vectors as the [Layer] lines of these points */
        char pre[128], l2[4096];
        vstats la, ld;
        snprintf(pre, sizeof pre, "[Layer] L=%d seq=0 pos=%d point=act n=%d ", L, pos, mt->n_ff);
        CHECKF(nth_line(err, pre, 0, l2, sizeof l2) && parse_stats(l2 + strlen(pre), &la) && la.min == a.min &&
                   la.max == a.max && la.mean == a.mean && la.rms == a.rms && la.at == a.at,
               "[FFN] act differs from '%s'", pre);
        snprintf(pre, sizeof pre, "[Layer] L=%d seq=0 pos=%d point=down n=%d ", L, pos, mt->n_embd);
        CHECKF(nth_line(err, pre, 0, l2, sizeof l2) && parse_stats(l2 + strlen(pre), &ld) && ld.min == d.min &&
                   ld.max == d.max && ld.rms == d.rms && ld.at == d.at,
               "[FFN] down differs from '%s'", pre);
    }
done:
    free(out);
    free(err);
}

/* -ctk / -ctv f16 on the CPU: the [KV] line's type and bytes; the two
 * naming different types is one line and exit 2; on CUDA (when there is a
 * GPU) f32 is refused in one line. */
static void check_kv_types(const char *path, const meta *mt) {
    const int n_ctx = 64 + (int)(t_rand_u64() % 100);
    const char *spell[3] = {"-ctk f16", "-ctv f16", "--cache-type-k=f16 --cache-type-v f16"};
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 2 --temp 0 --ctx %d --backend cpu --log-tags KV %s", path,
             n_ctx, spell[t_rand_u64() % 3]);
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "%s: exit %d: %s", args, rc, err);
    if (!rc) check_kv_cache(err, mt, n_ctx, "f16", 2, 16);
    free(out);
    free(err);
    out = err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 2 --backend cpu -ctk f16 -ctv f32", path);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 2 && err && strstr(err, "differ") && strchr(err, '\n') == err + strlen(err) - 1, "%s: exit %d: %s",
           args, rc, err);
    free(out);
    free(err);
    out = err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 2 --backend cuda -ctk f32", path);
    rc = t_run_doppler(args, &out, &err);
    if (rc != 0 && err && (strstr(err, "no CUDA support") || strstr(err, "no usable GPU")))
        printf("SKIP CUDA -ctk f32: %s", err);
    else
        CHECKF(rc != 0 && err && strstr(err, "f16 only") && strstr(err, "cpu backend") && strchr(err, '\n') == err + strlen(err) - 1,
               "%s: exit %d: %s", args, rc, err);
    free(out);
    free(err);
}

/* --log-tags KV: only [KV] lines; the default shows none of Kernel, KV, FFN
 * (and --debug alone no [FFN], no act/down [Layer] lines). */
static void check_filters(const char *path) {
    char args[2048], *out = NULL, *err = NULL, *out2 = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 3 --temp 0 --ignore-eos -t 1 --log-tags KV", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    const char *kv[] = {"[KV] "};
    CHECKF(err && lines_outside(err, kv, 1) == 0, "--log-tags KV printed other tags");
    CHECKF(err && count_lines(err, "[KV] ") == 3, "want 3 [KV] lines (cache, after prefill, at end): %s", err);
    free(err);
    /* stdout (the text) is the same with and without the logs */
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 3 --temp 0 --ignore-eos -t 1", path);
    CHECK(t_run_doppler(args, &out2, &err) == 0);
    CHECK(out && out2 && !strcmp(out, out2));
    const char *def[] = {"[Stats] "};
    CHECKF(err && lines_outside(err, def, 1) == 0 && count_lines(err, "[Stats] ") == 1, "default stderr: %s", err);
    free(out);
    free(out2);
    free(err);
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 2 --temp 0 -t 1 --debug --debug-layers 0", path);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    const char *dbg[] = {"[Stats] ", "[Layer] "};
    CHECKF(err && lines_outside(err, dbg, 2) == 0, "--debug stderr");
    CHECK(err && !strstr(err, "point=act") && !strstr(err, "point=down") && strstr(err, "point=resid_ffn"));
    free(err);
    /* --log-tags FFN with --debug: [FFN] only */
    snprintf(args, sizeof args, "run -m '%s' -p 'a b' -n 2 --temp 0 -t 1 --debug --debug-layers 1 --log-tags FFN", path);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    const char *ffn[] = {"[FFN] L=1 "};
    CHECKF(err && lines_outside(err, ffn, 1) == 0 && count_lines(err, "[FFN] ") == 2, "--log-tags FFN: %s", err);
    free(err);
    /* bench: the default text table has no [Kernel]/[KV] lines and "-" as device memory on the CPU */
    snprintf(args, sizeof args, "bench inference -m '%s' --prompt 4 --gen 2 --reps 1 -t 1 --backend cpu", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    const char *bench[] = {"[Bench] "};
    CHECKF(err && lines_outside(err, bench, 1) == 0, "bench stderr: %s", err);
    char line[4096];
    CHECKF(out && strstr(out, "  dev MB |") && nth_line(out, "     4 ", 0, line, sizeof line) && strstr(line, "|        - |"),
           "bench table: %s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "bench inference -m '%s' --prompt 4 --gen 2 --reps 1 -t 1 --backend cpu --json", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "device_mem_mb")) &&
          cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "device_kv_mb")));
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* DOPPLER_CPU=scalar: the [Kernel] line names the level really used. */
static void check_forced_level(const char *path) {
    setenv("DOPPLER_CPU", "scalar", 1);
    char args[1024], *err = NULL, line[4096];
    snprintf(args, sizeof args, "run -m '%s' -p 'a' -n 1 -t 1 --backend cpu --log-tags Kernel", path);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    CHECKF(err && nth_line(err, "[Kernel] backend=cpu level=scalar ", 0, line, sizeof line) &&
               nth_line(err, "[Kernel] ffn act=", 0, line, sizeof line) && strstr(line, "(scalar "),
           "DOPPLER_CPU=scalar: %s", err);
    free(err);
    unsetenv("DOPPLER_CPU");
}

/* chat: [KV] per turn, and /reset says it truncated the cache. */
static void check_chat(const char *path) {
    const char *in = t_tmp_path(".txt");
    const char *text = "hello there\nand again\n/reset\nnew start\n";
    CHECK(t_write_file(in, text, strlen(text)) == 0);
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "chat -m '%s' --temp 0 -n 4 --ctx 200 -t 1 --log-tags KV < '%s'", path, in);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    int c = 0;
    int end2 = kv_fill(err, "turn 2 at end", &c);
    char want[128], line[4096];
    snprintf(want, sizeof want, "[KV] /reset: cache truncated from %d to 0 of 200 positions", end2);
    CHECKF(end2 > 0 && c == 200 && nth_line(err, want, 0, line, sizeof line), "want '%s': %s", want, err);
    int p3 = kv_fill(err, "turn 3 after prefill", &c), p1 = kv_fill(err, "turn 1 after prefill", &c);
    CHECKF(p3 > 0 && p3 < end2 && p1 > 0, "turn 3 starts from an empty cache: %d (turn 1 %d, before reset %d)", p3, p1,
           end2);
    const char *kv[] = {"[KV] "};
    CHECK(err && lines_outside(err, kv, 1) == 0);
    free(err);
    remove(in);
}

/* The CUDA backend, when this build has one and a GPU is present. */
static void check_cuda(const char *path, const meta *mt) {
    char args[2048], *out = NULL, *err = NULL, line[4096];
    int n_ctx = 96 + (int)(t_rand_u64() % 100);
    snprintf(args, sizeof args, "run -m '%s' -p 'a b c' -n 3 --temp 0 --ignore-eos --ctx %d --backend cuda "
             "--log-tags Kernel,KV,FFN,Stats --debug --debug-layers 0", path, n_ctx);
    int rc = t_run_doppler(args, &out, &err);
    if (rc != 0 && err && (strstr(err, "no CUDA support") || strstr(err, "no usable GPU"))) {
        printf("SKIP CUDA part: %s", err);
        goto done;
    }
    CHECKF(rc == 0, "cuda run: %s", err);
    if (rc) goto done;
    int sm = 0, ma = 0, mi = 0;
    char *dv = err ? strstr(err, "[Kernel] backend=cuda device=\"") : NULL;
    char *q = dv ? strchr(dv + 30, '"') : NULL;
    CHECKF(q && sscanf(q, "\" sm=%d cc=%d.%d", &sm, &ma, &mi) == 3 && sm > 0 && ma >= 5, "cuda [Kernel]: %s", err);
    CHECKF(nth_line(err, "[Kernel] decode kernels: matvec ", 0, line, sizeof line) && strstr(line, "attention k_"),
           "decode kernels line");
    check_kv_cache(err, mt, n_ctx, "f16", 2, 64);
    double w = 0, k = 0, s = 0, t = 0;
    char uw[8], uk[8], us[8], ut[8];
    CHECKF(nth_line(err, "[Kernel] device memory of this session: weights ", 0, line, sizeof line) &&
               sscanf(line, "[Kernel] device memory of this session: weights %lf %7[KMGiB], KV %lf %7[KMGiB], scratch "
                      "%lf %7[KMGiB], total %lf %7[KMGiB]", &w, uw, &k, uk, &s, us, &t, ut) == 8,
           "device memory line: %s", err);
    /* a tiny model's f16 copies fit on any GPU: the log says they are part of the weights */
    CHECKF(count_lines(err, "[Kernel] the weights include ") == 1, "f16 copies line: %s", err);
    CHECKF(count_lines(err, "[FFN] L=0 ") == 3, "cuda [FFN] lines: %s", err);
    CHECKF(nth_line(err, "[Kernel] settings: ", 0, line, sizeof line) && strstr(line, "DOPPLER_CUDA_PDL=1") &&
               strstr(line, "DOPPLER_CUDA_MVW_PAIRS=32") && !strstr(line, "DOPPLER_CPU"),
           "cuda settings line: %s", err);
    free(out);
    free(err);
    out = err = NULL;
    /* a tuning setting is listed with its value; one out of range, or an unknown DOPPLER_CUDA_* name, is a
     * one-line error and exit 2 */
    setenv("DOPPLER_CUDA_ATTN_GQA_MUL", "2", 1);
    snprintf(args, sizeof args, "run -m '%s' -p 'a b c' -n 3 --temp 0 --ignore-eos --backend cuda --log-tags Kernel",
             path);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0 && err && strstr(err, "DOPPLER_CUDA_ATTN_GQA_MUL=2"), "GQA_MUL=2: rc %d %s", rc, err);
    free(out), free(err);
    /* without the f16 copies: one device memory line, known, and no copies line */
    unsetenv("DOPPLER_CUDA_ATTN_GQA_MUL");
    setenv("DOPPLER_CUDA_F16_WEIGHTS", "0", 1);
    rc = t_run_doppler(args, &out, &err);
    unsetenv("DOPPLER_CUDA_F16_WEIGHTS");
    CHECKF(rc == 0 && err && count_lines(err, "[Kernel] device memory of this session: weights ") == 1 &&
               count_lines(err, "[Kernel] device memory of this session: unknown") == 0 &&
               count_lines(err, "[Kernel] the weights include ") == 0,
           "F16_WEIGHTS=0: rc %d %s", rc, err);
    free(out), free(err);
    const char *bad[][2] = {{"DOPPLER_CUDA_ATTN_GQA_MUL", "9"}, {"DOPPLER_CUDA_MVQ", "0"}};
    for (int i = 0; i < 2; i++) {
        unsetenv("DOPPLER_CUDA_ATTN_GQA_MUL");
        setenv(bad[i][0], bad[i][1], 1);
        rc = t_run_doppler(args, &out, &err);
        unsetenv(bad[i][0]);
        CHECKF(rc == 2 && err && strstr(err, bad[i][0]) && count_lines(err, "doppler: error: ") == 1, "%s=%s: rc %d %s",
               bad[i][0], bad[i][1], rc, err);
        free(out), free(err);
    }
    out = err = NULL;
    snprintf(args, sizeof args, "bench inference -m '%s' --prompt 8 --gen 2 --reps 1 --backend cuda --json", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    const cJSON *tot = j ? cJSON_GetObjectItemCaseSensitive(j, "device_mem_mb") : NULL;
    double dw = j ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "device_weight_mb")) : NAN;
    double dk = j ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "device_kv_mb")) : NAN;
    double ds = j ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "device_scratch_mb")) : NAN;
    double dc = j ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "device_f16_copy_mb")) : NAN;
    CHECKF(cJSON_IsNumber(tot) && tot->valuedouble > 0, "device_mem_mb: %s", out);
    if (cJSON_IsNumber(tot)) {
        /* bench's context: prompt + gen + 1 positions of f16 K and V (allocations round up) */
        double kv_min = 11.0 * 2 * mt->n_layer * mt->n_head_kv * mt->head_dim * 2 / 1048576.0;
        CHECKF(fabs(dw + dk + ds - tot->valuedouble) < 1e-6 * tot->valuedouble, "parts %g+%g+%g != %g", dw, dk, ds,
               tot->valuedouble);
        CHECKF(dk >= kv_min && dk < kv_min + 8, "device KV %g MB, at least %g", dk, kv_min);
        CHECKF(dw > 0 && ds > 0, "weights %g scratch %g", dw, ds);
        /* the f16 copies (a tiny model's fit on any GPU): a part of the weights */
        CHECKF(dc > 0 && dc < dw, "f16 copies %g MB of weights %g MB", dc, dw);
    }
    cJSON_Delete(j);
done:
    free(out);
    free(err);
}

int main(void) {
    t_seed();
    unsetenv("DOPPLER_CPU");
    const char *archs[2] = {"gemma3", "llama"};
    const char *types[2] = {"q4_k_m", "q8_0"};
    for (int i = 0; i < 2; i++) {
        const char *path = t_tmp_path(".gguf");
        dp_synth_params sp = {.arch = archs[i], .preset = "tiny", .type = types[i], .seed = t_rand_u64()};
        CHECKF(dp_synth(&sp, path) == DP_OK, "synth %s: %s", archs[i], dp_last_error());
        meta mt;
        CHECKF(read_meta(path, &mt) == 0, "metadata of %s", path);
        printf("synthetic %s tiny: %d layers, %d kv heads x %d, n_ff %d, %s\n", archs[i], mt.n_layer, mt.n_head_kv,
               mt.head_dim, mt.n_ff, mt.act);
        check_cpu_run(path, &mt, "w1 w2 w3");
        if (i == 0) {
            check_filters(path);
            check_kv_types(path, &mt);
            check_forced_level(path);
            check_chat(path);
            check_cuda(path, &mt);
        }
        remove(path);
    }
    const char *real[2] = {"gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"};
    for (int i = 0; i < 2; i++) {
        const char *path = t_model_path(real[i]);
        if (!path) {
            printf("SKIP %s: not in the model cache (run scripts/fetch-models)\n", real[i]);
            continue;
        }
        meta mt;
        CHECKF(read_meta(path, &mt) == 0, "metadata of %s", path);
        printf("%s: %d layers, %d kv heads x %d, n_ff %d, %s\n", real[i], mt.n_layer, mt.n_head_kv, mt.head_dim, mt.n_ff,
               mt.act);
        check_cpu_run(path, &mt, "The color of the sky is");
    }
    return t_done("test_logs");
}

/* GGUF reader/writer: round trip of every value type, broken files that
 * must each give a one-line error naming the problem and exit code 2, and
 * paths that are not regular files (refused without blocking). */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doppler.h"
#include "gguf.h"
#include "quant.h"
#include "testlib.h"
#include "testmodel.h"

/* ------------------------------------------------------------ round trip */

static void test_roundtrip(void) {
    const char *path = t_tmp_path(".gguf");
    gguf_writer *w = gguf_writer_new(64);
    gguf_w_u32(w, "a.u32", 4000000000u);
    gguf_w_i32(w, "a.i32", -7);
    gguf_w_u64(w, "a.u64", 1ull << 40);
    gguf_w_f32(w, "a.f32", 1.5f);
    gguf_w_bool(w, "a.bool", 1);
    gguf_w_str(w, "a.str", "h\xc3\xa9llo");
    int32_t ints[5] = {1, -2, 3, -4, 5};
    gguf_w_arr(w, "a.arr_i32", GGUF_INT32, ints, 5);
    const char *strs[3] = {"x", "", "zz\nz"};
    gguf_w_arr_str(w, "a.arr_str", strs, NULL, 3);
    int64_t ne[2] = {64, 3};
    float data[192];
    for (int i = 0; i < 192; i++) data[i] = t_rand_normal();
    CHECK(gguf_w_tensor(w, "t.f32", DP_TYPE_F32, 2, ne, data) == 0);
    int64_t ne1[1] = {7};
    CHECK(gguf_w_tensor(w, "t.vec", DP_TYPE_F32, 1, ne1, data) == 0);
    CHECK(gguf_writer_write(w, path, NULL, NULL) == 0);
    gguf_writer_free(w);

    gguf_file *f = gguf_open(path);
    CHECKF(f != NULL, "%s", dp_last_error());
    if (!f) return;
    int64_t iv;
    double fv;
    int bv;
    gguf_str sv;
    CHECK(f->version == 3 && f->alignment == 64);
    CHECK(gguf_get_int(f, "a.u32", &iv) && iv == 4000000000ll);
    CHECK(gguf_get_int(f, "a.i32", &iv) && iv == -7);
    CHECK(gguf_get_int(f, "a.u64", &iv) && iv == (1ll << 40));
    CHECK(gguf_get_float(f, "a.f32", &fv) && fv == 1.5);
    CHECK(gguf_get_bool(f, "a.bool", &bv) && bv == 1);
    CHECK(gguf_get_str(f, "a.str", &sv) && sv.len == 6 && !memcmp(sv.ptr, "h\xc3\xa9llo", 6));
    const gguf_kv *ai = gguf_find_kv(f, "a.arr_i32");
    CHECK(ai && ai->type == GGUF_ARRAY && ai->arr_type == GGUF_INT32 && ai->n == 5);
    CHECK(ai && gguf_arr_num(ai, 3) == -4);
    const gguf_kv *as = gguf_find_kv(f, "a.arr_str");
    CHECK(as && as->n == 3);
    if (as) {
        gguf_str s2 = gguf_arr_str(as, 2);
        CHECK(s2.len == 4 && !memcmp(s2.ptr, "zz\nz", 4));
        CHECK(gguf_arr_str(as, 1).len == 0);
    }
    CHECK(gguf_find_kv(f, "nope") == NULL);
    const gguf_tensor *t = gguf_find_tensor(f, "t.f32");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 3 && t->nbytes == 192 * 4);
    CHECK(t && ((uintptr_t)t->data - (uintptr_t)f->map) % 64 == 0);
    CHECK(t && !memcmp(t->data, data, sizeof data));
    const gguf_tensor *tv = gguf_find_tensor(f, "t.vec");
    CHECK(tv && tv->n_dims == 1 && !memcmp(tv->data, data, 7 * 4));
    gguf_close(f);

    /* inspect prints the metadata and abbreviates */
    char *out = NULL, *err = NULL, args[600];
    snprintf(args, sizeof args, "inspect '%s'", path);
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "inspect exit %d: %s", rc, err);
    CHECK(out && strstr(out, "a.arr_str") && strstr(out, "[str x 3: \"x\", \"\", \"zz\\nz\"]"));
    CHECK(out && strstr(out, "t.f32") && strstr(out, "[64, 3]"));
    free(out);
    free(err);
    remove(path);
}

/* A nested array (array of arrays of u8) must parse and be skipped over. */
static void test_nested_array(void) {
    uint8_t buf[256];
    size_t n = 0;
#define PUT(p, k) (memcpy(buf + n, p, k), n += k)
    uint32_t v3 = 3, t_arr = GGUF_ARRAY, t_u8 = GGUF_UINT8, t_u32 = GGUF_UINT32;
    uint64_t nt = 0, nk = 2, klen, cnt;
    PUT("GGUF", 4);
    PUT(&v3, 4);
    PUT(&nt, 8);
    PUT(&nk, 8);
    klen = 6;
    PUT(&klen, 8);
    PUT("nested", 6);
    PUT(&t_arr, 4);
    PUT(&t_arr, 4);  /* element type: array */
    cnt = 2;
    PUT(&cnt, 8);
    for (int i = 0; i < 2; i++) {
        PUT(&t_u8, 4);
        cnt = 3;
        PUT(&cnt, 8);
        PUT("abc", 3);
    }
    klen = 5;
    PUT(&klen, 8);
    PUT("after", 5);
    PUT(&t_u32, 4);
    uint32_t val = 77;
    PUT(&val, 4);
#undef PUT
    gguf_file *f = gguf_open_memory(buf, n, "nested");
    CHECKF(f != NULL, "%s", dp_last_error());
    int64_t iv = 0;
    if (f) {
        CHECK(gguf_get_int(f, "after", &iv) && iv == 77);
        const gguf_kv *kv = gguf_find_kv(f, "nested");
        CHECK(kv && kv->arr_type == GGUF_ARRAY && kv->n == 2);
        gguf_close(f);
    }
    /* the same image cut anywhere must fail cleanly */
    for (size_t cut = 0; cut < n; cut++) {
        gguf_file *g = gguf_open_memory(buf, cut, "cut");
        CHECKF(g == NULL, "cut at %zu parsed", cut);
        gguf_close(g);
    }
}

/* ----------------------------------------------------------- broken files */

static char *load(const char *path, size_t *len) {
    char *b = t_read_file(path, len);
    if (!b) t_skip("cannot read %s", path);
    return b;
}

/* Offset of the u32 type field of the tensor info named name. */
static size_t tensor_type_offset(const char *buf, size_t len, const char *name, int n_dims) {
    size_t nl = strlen(name);
    for (size_t i = 8; i + nl < len; i++)
        if (!memcmp(buf + i, name, nl)) {
            uint64_t l;
            memcpy(&l, buf + i - 8, 8);
            if (l == nl) return i + nl + 4 + 8 * (size_t)n_dims;
        }
    return 0;
}

/* Runs `doppler CMD file` and checks: exit code 2, one stderr line that
 * starts with "doppler: error:" and contains `needle`. */
static void expect_error(const char *what, const char *cmd, const char *path, const char *needle) {
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "%s '%s'", cmd, path);
    int rc = t_run_doppler(args, &out, &err);
    int lines = 0;
    for (const char *p = err; p && *p; p++) lines += *p == '\n';
    CHECKF(rc == 2, "%s: exit code %d (want 2), stderr: %s", what, rc, err);
    CHECKF(lines == 1, "%s: %d stderr lines: %s", what, lines, err);
    CHECKF(err && !strncmp(err, "doppler: error:", 15), "%s: stderr: %s", what, err);
    CHECKF(err && strstr(err, needle), "%s: message lacks '%s': %s", what, needle, err);
    printf("  %-28s -> %s", what, err ? err : "(none)\n");
    free(out);
    free(err);
}

static void write_and_expect(const char *what, const char *buf, size_t len, const char *cmd, const char *needle) {
    const char *p = t_tmp_path(".gguf");
    CHECK(t_write_file(p, buf, len) == 0);
    expect_error(what, cmd, p, needle);
    remove(p);
}

static void test_broken(void) {
    const char *good = t_tmp_path(".gguf");
    CHECKF(tm_write(good, NULL) == 0, "%s", dp_last_error());
    size_t len;
    char *buf = load(good, &len);
    char *b = malloc(len);
    const char *run = "run -n 1 -p hello -m";

    /* the untouched file loads */
    dp_model *m = dp_model_load(good);
    CHECKF(m != NULL, "good model: %s", dp_last_error());
    dp_model_free(m);

    write_and_expect("empty file", buf, 0, "inspect", "empty");
    write_and_expect("truncated header", buf, 10, "inspect", "truncated");
    memcpy(b, buf, len);
    memcpy(b, "GGML", 4);
    write_and_expect("wrong magic", b, len, "inspect", "magic");
    memcpy(b, buf, len);
    uint32_t v = 1;
    memcpy(b + 4, &v, 4);
    write_and_expect("unsupported version 1", b, len, "inspect", "version 1");
    v = 4;
    memcpy(b + 4, &v, 4);
    write_and_expect("unsupported version 4", b, len, "inspect", "version 4");
    memcpy(b, buf, len);
    uint64_t big = 1ull << 62;
    memcpy(b + 8, &big, 8);
    write_and_expect("n_tensors overflow", b, len, "inspect", "tensor count");
    memcpy(b, buf, len);
    memcpy(b + 16, &big, 8);
    write_and_expect("n_kv overflow", b, len, "inspect", "metadata count");
    memcpy(b, buf, len);
    uint64_t huge = ~0ull - 5;
    memcpy(b + 24, &huge, 8); /* length of the first key */
    write_and_expect("string length overflow", b, len, "inspect", "string length");
    write_and_expect("tensor data beyond EOF", buf, len - 100, "inspect", "beyond the end");

    memcpy(b, buf, len);
    size_t to = tensor_type_offset(buf, len, "blk.0.attn_q.weight", 2);
    CHECK(to > 0);
    uint32_t ty = 99;
    memcpy(b + to, &ty, 4);
    write_and_expect("unknown type id", b, len, "inspect", "unknown type id 99");
    ty = DP_TYPE_I32; /* a ggml type of 4 bytes per element that models never use */
    memcpy(b + to, &ty, 4);
    write_and_expect("type not supported", b, len, run, "unsupported type I32");

    memcpy(b, buf, len);
    uint64_t ne1 = 64; /* attn_q [32, 32] claims [32, 64]: runs into the next tensor */
    memcpy(b + to - 8, &ne1, 8);
    write_and_expect("shape/size mismatch", b, len, "inspect", "overlaps tensor");

    memcpy(b, buf, len);
    to = tensor_type_offset(buf, len, "blk.0.attn_q.weight", 2);
    uint64_t ne0 = 33; /* not a multiple of 32 for Q8_0 */
    ty = DP_TYPE_Q8_0;
    memcpy(b + to, &ty, 4);
    memcpy(b + to - 16, &ne0, 8);
    write_and_expect("row not a block multiple", b, len, "inspect", "block size");
    free(b);
    free(buf);
    remove(good);

    /* model-level validation: shapes, required tensors and keys, arch */
    struct {
        const char *what;
        tm_opts o;
        const char *needle;
    } cases[] = {
        {"shape mismatch", {.bad_shape = "blk.1.ffn_up.weight"}, "has shape"},
        {"missing tensor", {.skip_tensor = "blk.1.ffn_down.weight"}, "missing required tensor 'blk.1.ffn_down.weight'"},
        {"missing qwen2 bias", {.arch = "qwen2", .skip_tensor = "blk.0.attn_k.bias"}, "attn_k.bias"},
        {"missing gemma3 q norm", {.arch = "gemma3", .skip_tensor = "blk.0.attn_q_norm.weight"}, "attn_q_norm"},
        {"missing key", {.skip_key = "llama.embedding_length"}, "missing required key 'llama.embedding_length'"},
        {"missing gemma3 window", {.arch = "gemma3", .skip_key = "gemma3.attention.sliding_window"}, "sliding_window"},
        {"missing architecture", {.skip_key = "general.architecture"}, "general.architecture"},
        {"missing vocabulary", {.skip_key = "tokenizer.ggml.tokens"}, "tokenizer.ggml.tokens"},
        {"unknown architecture", {.arch = "mamba"}, "unknown architecture 'mamba'"},
        {"unused tensor", {.extra_tensor = "blk.0.attn_output.bias"}, "tensor 'blk.0.attn_output.bias' is not used"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = t_tmp_path(".gguf");
        CHECK(tm_write(p, &cases[i].o) == 0);
        expect_error(cases[i].what, run, p, cases[i].needle);
        /* the library says the same without the CLI */
        CHECK(dp_model_load(p) == NULL && strstr(dp_last_error(), cases[i].needle));
        remove(p);
    }
    expect_error("missing file", "inspect", "/nonexistent/model.gguf", "cannot open");
}

/* Fuzz-style: random single-byte corruptions of a valid file never crash
 * the loader (ASan build catches out-of-bounds reads). */
static void test_corruptions(void) {
    const char *good = t_tmp_path(".gguf");
    CHECK(tm_write(good, &(tm_opts){.arch = "qwen2"}) == 0);
    size_t len;
    char *buf = load(good, &len);
    size_t header_end = len < 20000 ? len : 20000; /* metadata and tensor table */
    int loaded = 0;
    for (int it = 0; it < 300; it++) {
        char *b = malloc(len);
        memcpy(b, buf, len);
        for (int k = 0; k < 4; k++) b[t_rand_u64() % header_end] = (char)t_rand_u64();
        gguf_file *f = gguf_open_memory(b, len, "corrupt");
        loaded += f != NULL;
        gguf_close(f);
        free(b);
    }
    printf("  corruptions: %d of 300 still parsed\n", loaded);
    free(buf);
    remove(good);
}

/* Models that are not regular files are refused at once: a FIFO used to
 * block gguf_open in open() until a writer came (alarm() fails the test). */
static void test_not_regular(void) {
    const char *fifo = t_tmp_path(".fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(30);
    gguf_file *f = gguf_open(fifo);
    CHECK(f == NULL && strstr(dp_last_error(), fifo) && strstr(dp_last_error(), "not a regular file"));
    dp_model *m = dp_model_load(fifo);
    CHECK(m == NULL && strstr(dp_last_error(), "not a regular file"));
    CHECK(gguf_open("/dev/null") == NULL && strstr(dp_last_error(), "not a regular file"));
    CHECK(gguf_open("/tmp") == NULL && strstr(dp_last_error(), strerror(EISDIR)));
    alarm(0);
    remove(fifo);
}

/* Token types outside the known range (in any numeric type, even beyond
 * int's range or NaN) are plain tokens, not undefined behaviour (found by
 * fuzz_model: a u32 of 3003120000). */
static void test_token_type_range(void) {
    enum { V = 300 };
    const char *src = t_tmp_path(".gguf");
    CHECK(tm_write(src, NULL) == 0);
    uint32_t u[V];
    float x[V];
    for (int i = 0; i < V; i++) {
        u[i] = i % 3 ? 3003120000u + (uint32_t)i : 1;
        x[i] = i % 3 ? (i % 2 ? 1e30f : NAN) : 1.0f;
    }
    for (int as_float = 0; as_float < 2; as_float++) {
        gguf_file *f = gguf_open(src);
        CHECK(f && f->n_kv > 0);
        if (!f) return;
        gguf_writer *w = gguf_writer_new(32);
        for (int i = 0; i < f->n_kv; i++)
            if (strcmp(f->kv[i].key, "tokenizer.ggml.token_type")) gguf_w_copy_kv(w, &f->kv[i]);
        if (as_float) gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_FLOAT32, x, V);
        else gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_UINT32, u, V);
        const char *dst = tm_write_copy(w, f);
        gguf_close(f);
        dp_model *m = dst ? dp_model_load(dst) : NULL;
        CHECKF(m != NULL, "%s", dp_last_error());
        int32_t ids[16];
        CHECK(m && dp_tokenize(m, "w1 w2", 5, 0, 0, ids, 16) > 0);
        dp_model_free(m);
        if (dst) remove(dst);
    }
    remove(src);
}

int main(void) {
    t_seed();
    test_not_regular();
    test_token_type_range();
    test_roundtrip();
    test_nested_array();
    test_broken();
    test_corruptions();
    return t_done("test_gguf");
}

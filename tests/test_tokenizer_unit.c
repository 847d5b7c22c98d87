/* Tokenizer behaviour beyond the corpus: streaming decode of split UTF-8,
 * U+FFFD on flush, end-of-generation sets, BOS flags, piece lookup, the cap
 * contract, invalid UTF-8, unknown pre-tokenizers and load time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "gguf.h"
#include "testlib.h"
#include "testmodel.h"

static int tok(dp_model *m, const char *s, int bos, int special, int32_t *out, int cap) {
    return dp_tokenize(m, s, strlen(s), bos, special, out, cap);
}

/* Copy of a GGUF with one string key replaced (value NULL: removed). */
static const char *rewrite(const char *src, const char *key, const char *value) {
    gguf_file *f = gguf_open(src);
    if (!f) return NULL;
    gguf_writer *w = gguf_writer_new(32);
    for (int i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key)) gguf_w_copy_kv(w, &f->kv[i]);
    if (value) gguf_w_str(w, key, value);
    const char *out = tm_write_copy(w, f);
    gguf_close(f);
    return out;
}

static void stream_checks(dp_model *m, const char *text, int one_char) {
    int32_t ids[256];
    int n = tok(m, text, 0, 0, ids, 256);
    CHECK(n > 1 && n <= 256);
    if (n > 256) return;
    dp_detok *d = dp_detok_new(m, 0);
    char buf[256], all[1024];
    int total = 0, early = 0;
    for (int i = 0; i < n; i++) {
        int k = dp_detok_push(d, ids[i], buf, sizeof buf);
        if (i < n - 1 && k > 0) early = 1;
        memcpy(all + total, buf, (size_t)k);
        total += k;
    }
    total += dp_detok_flush(d, all + total, (int)sizeof all - total);
    dp_detok_free(d);
    CHECKF(!one_char || !early, "'%s' is split over %d tokens; nothing may come out before the last one", text, n);
    CHECKF(total == (int)strlen(text) && !memcmp(all, text, (size_t)total), "stream decode of '%s'", text);
}

int main(void) {
    const char *gemma = t_model_path("gemma-3-270m-q4_k_m.gguf");
    const char *qwen = t_shared_fixture("qwen2-tokenizer-tiny.gguf");
    const char *llama3 = t_shared_fixture("llama3-tokenizer-tiny.gguf");
    const char *smol = t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!gemma && !qwen) t_skip("neither the Gemma model nor the shared tokenizer fixtures are present");
    int32_t ids[512];
    char buf[64];

    if (gemma) {
        double t0 = dp_time_s();
        dp_model *m = dp_model_load(gemma);
        double dt = dp_time_s() - t0;
        CHECKF(m != NULL, "%s", dp_last_error());
        fprintf(stderr, "gemma load (model + 262144-token vocabulary): %.1f ms\n", dt * 1e3);
        /* a 4-byte character missing from the vocabulary: 4 byte-fallback tokens */
        stream_checks(m, "\xF0\x9E\x93\x90", 1);
        int n = tok(m, "\xF0\x9E\x93\x90", 0, 0, ids, 512);
        CHECK(n == 4);
        /* a lone lead byte decodes to U+FFFD on flush */
        dp_detok *d = dp_detok_new(m, 0);
        CHECK(dp_detok_push(d, ids[0], buf, sizeof buf) == 0);
        int k = dp_detok_flush(d, buf, sizeof buf);
        CHECK(k == 3 && !memcmp(buf, "\xEF\xBF\xBD", 3));
        dp_detok_free(d);
        /* BOS by default, control tokens only with parse_special */
        n = tok(m, "<start_of_turn>user", 1, 1, ids, 512);
        CHECK(n == 3 && ids[0] == 2 && ids[1] == 105 && ids[2] == 2364);
        n = tok(m, "<start_of_turn>", 0, 0, ids, 512);
        CHECK(n > 1 && ids[0] != 105);
        /* user-defined tokens are always whole */
        n = tok(m, "a<b>c", 0, 0, ids, 512);
        CHECK(n == 3 && ids[1] == 200);
        CHECK(dp_token_is_eog(m, 1) && dp_token_is_eog(m, 106) && !dp_token_is_eog(m, 105) && !dp_token_is_eog(m, 2));
        /* the file spells the two-space token with spaces */
        size_t pl;
        const char *p = dp_token_piece(m, 138, &pl);
        CHECK(pl == 2 && !memcmp(p, "  ", 2));
        CHECK(dp_token_lookup(m, "  ", 2) == 138);
        CHECK(dp_token_lookup(m, "<end_of_turn>", 13) == 106);
        CHECK(dp_token_lookup(m, "no such piece!", 14) == -1);
        k = dp_token_to_bytes(m, 106, 0, buf, sizeof buf);
        CHECK(k == 0);
        k = dp_token_to_bytes(m, 106, 1, buf, sizeof buf);
        CHECK(k == 13 && !memcmp(buf, "<end_of_turn>", 13));
        CHECK(dp_token_to_bytes(m, 1 << 30, 1, buf, sizeof buf) < 0);
        /* cap contract: the full count comes back, only cap ids are written */
        int full = tok(m, "The quick brown fox jumps over the lazy dog", 1, 0, ids, 512);
        int32_t small[3] = {-7, -7, -7};
        CHECK(tok(m, "The quick brown fox jumps over the lazy dog", 1, 0, small, 2) == full && small[2] == -7 &&
              small[0] == ids[0] && small[1] == ids[1]);
        /* invalid UTF-8 is refused with a message */
        n = dp_tokenize(m, "ab\xC3(", 4, 1, 0, ids, 512);
        CHECK(n < 0 && strstr(dp_last_error(), "UTF-8"));
        CHECK(tok(m, "", 1, 0, ids, 512) == 1 && ids[0] == 2);
        CHECK(tok(m, "", 0, 0, ids, 512) == 0);
        dp_model_free(m);
    }
    if (qwen) {
        dp_model *m = dp_model_load(qwen);
        CHECKF(m != NULL, "%s", dp_last_error());
        stream_checks(m, "\xF0\xA8\xBA\xB6", 1); /* a rare CJK character: several byte-level tokens */
        CHECK(tok(m, "hi", 1, 0, ids, 512) == 1); /* Qwen adds no BOS */
        CHECK(dp_token_is_eog(m, 151645) && dp_token_is_eog(m, 151643) && !dp_token_is_eog(m, 151644));
        /* NFC: decomposed and composed e-acute tokenize the same */
        int32_t a[16], b[16];
        int na = tok(m, "caf\x65\xCC\x81", 0, 0, a, 16), nb = tok(m, "caf\xC3\xA9", 0, 0, b, 16);
        CHECK(na == nb && na <= 16 && !memcmp(a, b, sizeof(int32_t) * (size_t)na));
        /* user-defined <think> is whole even without parse_special, control tokens are not */
        CHECK(tok(m, "<think>", 0, 0, ids, 512) == 1 && ids[0] == 151667);
        CHECK(tok(m, "<|im_start|>", 0, 0, ids, 512) > 1);
        CHECK(tok(m, "<|im_start|>", 0, 1, ids, 512) == 1 && ids[0] == 151644);
        dp_model_free(m);
        /* unknown pre-tokenizer: a clear error naming it */
        const char *bad = rewrite(qwen, "tokenizer.ggml.pre", "frobnicator-v9");
        CHECK(bad != NULL);
        if (bad) {
            dp_model *mb = dp_model_load(bad);
            CHECK(mb == NULL && strstr(dp_last_error(), "frobnicator-v9") && strstr(dp_last_error(), "tokenizer.ggml.pre"));
            char *err = NULL;
            char args[600];
            snprintf(args, sizeof args, "tokenize -m '%s' hello", bad);
            int rc = t_run_doppler(args, NULL, &err);
            CHECKF(rc == 2 && err && strstr(err, "frobnicator-v9"), "rc %d, stderr: %s", rc, err ? err : "");
            free(err);
            remove(bad);
        }
        /* a template no built-in matches (rendered as Jinja), and none at all on a non-Gemma model */
        const char *odd = rewrite(qwen, "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
        const char *none = rewrite(qwen, "tokenizer.chat_template", NULL);
        dp_chat_msg msg = {"user", "hi"};
        if (odd && (m = dp_model_load(odd))) {
            CHECK(dp_chat_template_detect(m) == NULL);
            char *r = dp_chat_apply(m, NULL, &msg, 1, 1);
            CHECKF(r && !strcmp(r, "hi"), "%s", r ? r : dp_last_error());
            free(r);
            r = dp_chat_apply(m, "chatml", &msg, 1, 1);
            CHECK(r && !strcmp(r, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
            free(r);
            dp_model_free(m);
        }
        if (none && (m = dp_model_load(none))) {
            char *r = dp_chat_apply(m, NULL, &msg, 1, 1);
            CHECK(r == NULL && strstr(dp_last_error(), "no chat template"));
            dp_model_free(m);
            char *err = NULL;
            char args[600];
            snprintf(args, sizeof args, "chat -m '%s' </dev/null", none);
            int rc = t_run_doppler(args, NULL, &err);
            CHECKF(rc == 2 && err && strstr(err, "--chat-template"), "rc %d, stderr: %s", rc, err ? err : "");
            free(err);
        }
        if (odd) remove(odd);
        if (none) remove(none);
    }
    if (llama3) {
        dp_model *m = dp_model_load(llama3);
        CHECKF(m != NULL, "%s", dp_last_error());
        CHECK(tok(m, "hi", 1, 0, ids, 512) == 2 && ids[0] == 128000); /* add_bos_token = true */
        CHECK(tok(m, "hi", 0, 0, ids, 512) == 1);
        CHECK(dp_token_is_eog(m, 128009) && dp_token_is_eog(m, 128001) && !dp_token_is_eog(m, 128000));
        dp_model_free(m);
    }
    if (smol) {
        dp_model *m = dp_model_load(smol);
        CHECKF(m != NULL, "%s", dp_last_error());
        CHECK(dp_token_is_eog(m, 2) && dp_token_is_eog(m, 0) && !dp_token_is_eog(m, 1));
        stream_checks(m, "\xE2\x9D\xA4\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x94\xA5", 0); /* heart on fire, ZWJ */
        dp_model_free(m);
    }
    return t_done("test_tokenizer_unit");
}

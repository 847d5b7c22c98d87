/* POST /tokenize and POST /detokenize, as llama-server has them (see
 * tokens.h). Clients use them to count a prompt's tokens, to build prompts
 * of token ids for /v1/completions and to show what the model sees, so
 * the ids are exactly those a completion's prompt gets and the text is
 * what the model's tokens stand for. */
#include "tokens.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jsonw.h"
#include "request.h"
#include "serve.h"

/* ids a request may give or get: as many as a completion's prompt of token ids (request.c); the body limit
 * (--max-body) comes first at its default */
#define TOK_MAX_TOKENS (1 << 24)

/* The body as a JSON object, or NULL after answering with the error. */
static cJSON *body_object(http_req *c) {
    size_t len;
    const char *body = http_body(c, &len);
    req_error e;
    cJSON *root = req_json(body, len, &e);
    if (!root) {
        http_reply_error(c, e.status, e.param[0] ? e.param : NULL, "%s", e.message);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        http_reply_error(c, 400, NULL, "the request body must be a JSON object");
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static int flag(http_req *c, const cJSON *root, const char *name, int dflt, int *out) {
    const cJSON *v = req_field(root, name);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsBool(v)) {
        http_reply_error(c, 400, name, "'%s' must be true or false", name);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

static void reply(http_req *c, sbuf *b) {
    if (b->oom) http_reply_error(c, 500, NULL, "out of memory for the answer");
    else http_reply(c, 200, "application/json", b->s, b->n);
}

/* The tokens of text (malloc'ed, *n of them), or NULL after answering. */
static int32_t *text_tokens(http_req *c, const server *S, const char *text, int add_bos, int parse_special, int *n) {
    const size_t len = strlen(text); /* req_json refuses NUL, so the string is whole */
    int cap = (int)(len < TOK_MAX_TOKENS ? len : TOK_MAX_TOKENS) + 16;
    int32_t *ids = NULL;
    for (;;) {
        free(ids);
        if (!(ids = malloc(sizeof *ids * (size_t)cap))) {
            http_reply_error(c, 500, NULL, "out of memory for the tokens");
            return NULL;
        }
        const int k = dp_tokenize(S->m, text, len, add_bos, parse_special, ids, cap);
        if (k < 0) {
            http_reply_error(c, 400, "content", "cannot tokenize 'content': %s", dp_last_error());
            break;
        }
        if (k > TOK_MAX_TOKENS) {
            http_reply_error(c, 400, "content", "'content' is %d tokens, more than the %d a request may hold", k,
                             TOK_MAX_TOKENS);
            break;
        }
        if (k <= cap) {
            *n = k;
            return ids;
        }
        cap = k;
    }
    free(ids);
    return NULL;
}

/* {"id": tok, "piece": ...}: the piece is the token's bytes as the detokenizer renders them (control tokens
 * as their text, as llama-server's common_token_to_piece with special = true), a string where they are UTF-8
 * and the list of byte values where they are not (a byte-fallback token, part of a character). 0, or -1 when
 * the tokenizer failed. */
static int piece_entry(sbuf *b, const dp_model *m, int32_t tok) {
    char small[256], *s = small;
    int k = dp_token_to_bytes(m, tok, 1, small, (int)sizeof small);
    if (k < 0) return -1;
    if (k > (int)sizeof small) {
        if (!(s = malloc((size_t)k))) {
            b->oom = 1;
            return 0;
        }
        dp_token_to_bytes(m, tok, 1, s, k);
    }
    sb_printf(b, "{\"id\":%d,\"piece\":", (int)tok);
    if (req_utf8_valid(s, (size_t)k)) {
        sb_json_str(b, s, (size_t)k);
    } else {
        sb_puts(b, "[");
        for (int i = 0; i < k; i++) sb_printf(b, i ? ",%u" : "%u", (unsigned)(unsigned char)s[i]);
        sb_puts(b, "]");
    }
    sb_puts(b, "}");
    if (s != small) free(s);
    return 0;
}

/* {"content": text, "add_special": false, "parse_special": true, "with_pieces": false} ->
 * {"tokens": [ids]} or {"tokens": [{"id", "piece"}]}. add_special adds BOS where the model's tokenizer
 * adds one; parse_special matches special-token strings (<start_of_turn>) as their single tokens, as a
 * completion's prompt is read. */
void serve_tokenize(http_req *c, void *user) {
    const server *S = user;
    cJSON *root = body_object(c);
    if (!root) return;
    const cJSON *content = req_field(root, "content");
    int add_special, parse_special, with_pieces;
    if (!content) {
        http_reply_error(c, 400, "content", "'content' is required (the text to tokenize)");
    } else if (!cJSON_IsString(content)) {
        http_reply_error(c, 400, "content", "'content' must be a string");
    } else if (!flag(c, root, "add_special", 0, &add_special) && !flag(c, root, "parse_special", 1, &parse_special) &&
               !flag(c, root, "with_pieces", 0, &with_pieces)) {
        int n = 0;
        int32_t *ids = text_tokens(c, S, content->valuestring, add_special, parse_special, &n);
        if (ids) {
            sbuf b = {0};
            int bad = 0;
            sb_puts(&b, "{\"tokens\":[");
            for (int i = 0; i < n && !bad && !b.oom; i++) {
                if (i) sb_puts(&b, ",");
                if (!with_pieces) sb_printf(&b, "%d", (int)ids[i]);
                else bad = piece_entry(&b, S->m, ids[i]);
            }
            sb_puts(&b, "]}\n");
            if (bad) http_reply_error(c, 500, NULL, "cannot render a token: %s", dp_last_error());
            else reply(c, &b);
            sb_free(&b);
            free(ids);
        }
    }
    cJSON_Delete(root);
}

/* The ids of 'tokens' (malloc'ed, *n of them; NULL with *n = 0 for an empty list), checked against the
 * vocabulary. 0, or -1 after answering. */
static int token_ids(http_req *c, const server *S, const cJSON *root, int32_t **out, int *n) {
    const cJSON *t = req_field(root, "tokens");
    *out = NULL;
    *n = 0;
    if (!t) {
        http_reply_error(c, 400, "tokens", "'tokens' is required (a list of token ids)");
        return -1;
    }
    if (!cJSON_IsArray(t)) {
        http_reply_error(c, 400, "tokens", "'tokens' must be a list of token ids");
        return -1;
    }
    const int count = cJSON_GetArraySize(t);
    if (count > TOK_MAX_TOKENS) {
        http_reply_error(c, 400, "tokens", "'tokens' holds more than %d tokens", TOK_MAX_TOKENS);
        return -1;
    }
    if (!count) return 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)count);
    if (!ids) {
        http_reply_error(c, 500, NULL, "out of memory for the tokens");
        return -1;
    }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, t) {
        const double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!isfinite(d) || floor(d) != d) {
            http_reply_error(c, 400, "tokens", "tokens[%d] is not a token id (an integer)", i);
            free(ids);
            return -1;
        }
        if (d < 0 || d >= S->info->n_vocab) {
            http_reply_error(c, 400, "tokens", "tokens[%d] = %.15g is not a token id (the vocabulary has %d)", i, d,
                             S->info->n_vocab);
            free(ids);
            return -1;
        }
        ids[i++] = (int32_t)d;
    }
    *out = ids;
    *n = i;
    return 0;
}

/* The text of ids[0..n) as a completion's answer is written: the streaming detokenizer with control tokens
 * rendered (llama-server's /detokenize renders them), bytes that form no character as U+FFFD. 0, or -1 on
 * failure (dp_last_error). */
static int ids_text(const dp_model *m, const int32_t *ids, int n, sbuf *text) {
    dp_detok *d = dp_detok_new(m, 1);
    if (!d) return -1;
    char small[256], *buf = small;
    size_t cap = sizeof small;
    int rc = 0;
    for (int i = 0; i < n && !rc && !text->oom; i++) {
        /* the detokenizer drops what does not fit, so room for the token, the bytes it held back and their
         * growth into U+FFFD (3 bytes each) */
        const int k = dp_token_to_bytes(m, ids[i], 1, small, (int)sizeof small);
        const size_t need = k < 0 ? 0 : 3 * ((size_t)k + 8);
        if (need > cap) {
            char *nb = malloc(need);
            if (!nb) {
                text->oom = 1;
                break;
            }
            if (buf != small) free(buf);
            buf = nb;
            cap = need;
        }
        const int w = k < 0 ? k : dp_detok_push(d, ids[i], buf, (int)cap);
        if (w < 0) rc = -1;
        else sb_add(text, buf, (size_t)w);
    }
    if (!rc) {
        const int w = dp_detok_flush(d, buf, (int)cap); /* at most 3 held bytes, each U+FFFD */
        if (w < 0) rc = -1;
        else sb_add(text, buf, (size_t)w);
    }
    if (buf != small) free(buf);
    dp_detok_free(d);
    return rc;
}

/* {"tokens": [ids]} -> {"content": text}. */
void serve_detokenize(http_req *c, void *user) {
    const server *S = user;
    cJSON *root = body_object(c);
    if (!root) return;
    int32_t *ids;
    int n;
    if (!token_ids(c, S, root, &ids, &n)) {
        sbuf text = {0}, b = {0};
        if (ids_text(S->m, ids, n, &text)) {
            http_reply_error(c, 500, NULL, "cannot detokenize: %s", dp_last_error());
        } else {
            sb_puts(&b, "{\"content\":");
            sb_json_str(&b, text.s ? text.s : "", text.n);
            sb_puts(&b, "}\n");
            if (text.oom) b.oom = 1;
            reply(c, &b);
        }
        sb_free(&text);
        sb_free(&b);
        free(ids);
    }
    cJSON_Delete(root);
}

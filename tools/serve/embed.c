/* POST /v1/embeddings, as OpenAI has it (embed.h). The body is read here
 * rather than by request.c, with which it shares no field but model. Each
 * input becomes a group of one sequence of the scheduler, the request's
 * groups chained as a completion's several prompts are (srv_req_prompt):
 * the request holds one place in the queue, its inputs are admitted as
 * sequences free up, and their rows are computed in chunks beside other
 * requests' rows. The scheduler adds the hidden states an input's pooling
 * reads into its accumulator (embed_add) and ends it once its last
 * position is computed; the connection thread then pools, normalises and
 * writes the answer. */
#include "embed.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jsonw.h"
#include "request.h"
#include "serve.h"

#define MAX_INPUTS 2048 /* OpenAI's limit of inputs per request */
#define WAIT_MS 1000

/* ------------------------------------------------------ scheduler side */

int embed_wants(const srv_req *r, int pos) {
    switch (r->pooling) {
    case DP_POOLING_MEAN: return 1;
    case DP_POOLING_CLS: return pos == 0;
    default: return pos == r->n_prompt - 1;
    }
}

void embed_add(srv_req *r, const float *row, int n_embd) {
    double *a = r->emb;
    if (r->pooling == DP_POOLING_MEAN)
        for (int j = 0; j < n_embd; j++) a[j] += row[j];
    else
        for (int j = 0; j < n_embd; j++) a[j] = row[j];
}

/* ------------------------------------------------------------ the body */

typedef struct {
    int base64;              /* encoding_format "base64": little-endian float32 bytes */
    int dims;                /* the leading values answered (dimensions), n_embd when not given */
    int pooling;             /* DP_POOLING_MEAN, CLS or LAST */
} embed_opts;

/* model, encoding_format, dimensions and the pooling: 0, or -1 after
 * answering with the error. user is OpenAI's end-user id: nothing here. */
static int read_opts(http_req *c, const server *S, const cJSON *root, embed_opts *o) {
    const int E = S->info->n_embd;
    const cJSON *v = req_field(root, "model");
    if (v && !cJSON_IsString(v)) {
        http_reply_error(c, 400, "model", "'model' must be a string");
        return -1;
    }
    o->base64 = 0;
    if ((v = req_field(root, "encoding_format"))) {
        const int f = cJSON_IsString(v) && !strcmp(v->valuestring, "float");
        o->base64 = cJSON_IsString(v) && !strcmp(v->valuestring, "base64");
        if (!f && !o->base64) {
            http_reply_error(c, 400, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            return -1;
        }
    }
    o->dims = E;
    if ((v = req_field(root, "dimensions"))) {
        const double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!isfinite(d) || floor(d) != d || d < 1 || d > E) {
            http_reply_error(c, 400, "dimensions", "'dimensions' must be an integer from 1 to %d (the model's "
                                                   "embedding size)", E);
            return -1;
        }
        o->dims = (int)d;
    }
    /* a file that says nothing is a decoder-only model's, whose embedding is its last position's */
    o->pooling = S->pooling ? S->pooling : DP_POOLING_LAST;
    if (o->pooling == DP_POOLING_RANK) {
        http_reply_error(c, 400, NULL, "this model is a reranker (its pooling_type is rank): it scores a query "
                                       "against a document and has no embedding (doppler serve --pooling "
                                       "mean|cls|last pools its hidden states anyway)");
        return -1;
    }
    return 0;
}

/* What 'input' holds: *n inputs, texts or lists of ids; nested: a list of
 * them (each named by its index), else the one. 0, or -1 after answering. */
static int input_shape(http_req *c, const cJSON *in, int *n, int *text, int *nested) {
    static const char *what = "'input' must be a string, a list of strings, a list of token ids or a list of "
                              "lists of token ids";
    if (!in) {
        http_reply_error(c, 400, "input", "'input' is required");
        return -1;
    }
    *n = 1, *nested = 0;
    if (cJSON_IsString(in)) return *text = 1, 0;
    if (!cJSON_IsArray(in)) {
        http_reply_error(c, 400, "input", "%s", what);
        return -1;
    }
    const cJSON *first = in->child;
    if (!first) {
        http_reply_error(c, 400, "input", "'input' is an empty list");
        return -1;
    }
    if (cJSON_IsNumber(first)) return *text = 0, 0; /* one list of ids (its items are checked with them) */
    if (!cJSON_IsString(first) && !cJSON_IsArray(first)) {
        http_reply_error(c, 400, "input", "input[0]: %s", what);
        return -1;
    }
    *text = cJSON_IsString(first);
    *nested = 1;
    *n = cJSON_GetArraySize(in);
    if (*n > MAX_INPUTS) {
        http_reply_error(c, 400, "input", "'input' holds %d inputs, more than the %d a request may hold", *n,
                         MAX_INPUTS);
        return -1;
    }
    int k = 0;
    for (const cJSON *it = first; it; it = it->next, k++)
        if (*text ? !cJSON_IsString(it) : !cJSON_IsArray(it)) {
            http_reply_error(c, 400, "input", "input[%d] must be %s, as input[0] is (a list of inputs holds strings "
                                              "or lists of token ids, not both)", k,
                             *text ? "a string" : "a list of token ids");
            return -1;
        }
    return 0;
}

/* The tokens of input k (it: its string or list of ids) into r: a text as
 * llama-server tokenizes one for an embedding (the model's BOS, and EOS
 * where its tokenizer adds one; special-token strings read as their
 * tokens), ids as given. 0, or -1 after answering. */
static int input_tokens(http_req *c, const server *S, const cJSON *it, int k, int nested, srv_req *r) {
    char what[40];
    if (nested) snprintf(what, sizeof what, "input[%d]", k);
    else snprintf(what, sizeof what, "'input'");
    int n = 0;
    if (cJSON_IsString(it)) {
        const char *s = it->valuestring;
        const size_t len = strlen(s); /* req_json refuses NUL, so the string is whole */
        if (!len) {
            http_reply_error(c, 400, "input", "%s is an empty string", what);
            return -1;
        }
        /* beyond the context it is refused anyway: its tokens are counted, not all kept */
        int cap = (int)(len < (size_t)S->n_ctx ? len : (size_t)S->n_ctx) + 16;
        for (;;) {
            free(r->prompt);
            if (!(r->prompt = malloc(sizeof *r->prompt * (size_t)cap))) goto oom;
            n = dp_tokenize(S->m, s, len, 1, 1, r->prompt, cap);
            if (n < 0) {
                http_reply_error(c, 400, "input", "cannot tokenize %s: %s", what, dp_last_error());
                return -1;
            }
            if (n <= cap || n > S->n_ctx) break;
            cap = n;
        }
        if (n == 0) {
            http_reply_error(c, 400, "input", "%s has no tokens", what);
            return -1;
        }
    } else {
        n = cJSON_GetArraySize(it);
        if (!n) {
            http_reply_error(c, 400, "input", "%s is an empty list of token ids", what);
            return -1;
        }
        if (n <= S->n_ctx && !(r->prompt = malloc(sizeof *r->prompt * (size_t)n))) goto oom;
        int j = 0;
        for (const cJSON *t = it->child; t; t = t->next, j++) {
            const double v = cJSON_IsNumber(t) ? t->valuedouble : NAN;
            if (!isfinite(v) || floor(v) != v || v < 0 || v >= S->info->n_vocab) {
                if (nested)
                    http_reply_error(c, 400, "input", "input[%d][%d] is not a token id (an integer from 0 to %d)", k,
                                     j, S->info->n_vocab - 1);
                else
                    http_reply_error(c, 400, "input", "input[%d] is not a token id (an integer from 0 to %d)", j,
                                     S->info->n_vocab - 1);
                return -1;
            }
            if (r->prompt) r->prompt[j] = (int32_t)v;
        }
    }
    if (n > S->n_ctx) {
        http_reply_error(c, 400, "input", "%s has %d tokens, more than the context of %d", what, n, S->n_ctx);
        return -1;
    }
    r->n_prompt = n;
    if (!(r->emb = calloc((size_t)S->info->n_embd, sizeof *r->emb))) goto oom;
    return 0;
oom:
    http_reply_error(c, 500, NULL, "out of memory for %s", what);
    return -1;
}

/* A request never submitted (r[0..n), NULLs where none was made): the
 * later inputs go before the first, which they hold; frees r. */
static void destroy_inputs(srv_req **r, int n) {
    for (int i = n - 1; i >= 0; i--) srv_req_destroy(r[i]);
    free(r);
}

/* The request's inputs, each a scheduler group of one sequence, into
 * *out (*n of them). 0, or -1 after answering. */
static int make_inputs(http_req *c, const server *S, const cJSON *root, int pooling, srv_req ***out, int *n_out) {
    const cJSON *in = req_field(root, "input");
    int n, text, nested;
    if (input_shape(c, in, &n, &text, &nested)) return -1;
    srv_req **r = calloc((size_t)n, sizeof *r);
    if (!r || !(r[0] = srv_req_new())) {
        free(r);
        http_reply_error(c, 500, NULL, "out of memory");
        return -1;
    }
    r[0]->p.n = 1; /* one "choice" per input: input k is the response's index k */
    r[0]->client_fd = http_client_fd(c);
    r[0]->t_submit = dp_time_s();
    const cJSON *it = nested ? in->child : in;
    for (int k = 0; k < n; k++, it = nested ? it->next : NULL) {
        if (k && !(r[k] = srv_req_prompt(r[0]))) {
            http_reply_error(c, 500, NULL, "out of memory");
            destroy_inputs(r, n);
            return -1;
        }
        r[k]->pooling = pooling;
        if (input_tokens(c, S, it, k, nested, r[k])) {
            destroy_inputs(r, n);
            return -1;
        }
    }
    *out = r;
    *n_out = n;
    return 0;
}

/* ----------------------------------------------------------- answering */

static void put_base64(sbuf *b, const float *v, int n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4;
    unsigned char *bytes = malloc(nb);
    char *text = malloc((nb + 2) / 3 * 4);
    if (!bytes || !text) {
        b->oom = 1;
        free(bytes), free(text);
        return;
    }
    for (int i = 0; i < n; i++) { /* little-endian whatever the host's order */
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    size_t t = 0;
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t x = (uint32_t)bytes[i] << 16 | (i + 1 < nb ? (uint32_t)bytes[i + 1] << 8 : 0) |
                           (i + 2 < nb ? bytes[i + 2] : 0);
        text[t++] = digits[x >> 18 & 63];
        text[t++] = digits[x >> 12 & 63];
        text[t++] = i + 1 < nb ? digits[x >> 6 & 63] : '=';
        text[t++] = i + 2 < nb ? digits[x & 63] : '=';
    }
    sb_puts(b, "\"");
    sb_add(b, text, t);
    sb_puts(b, "\"");
    free(bytes), free(text);
}

/* Input r's embedding into v: pooled (the mean: the sum over its
 * positions divided by their count; cls and last: the one row), its first
 * dims values L2-normalised, as OpenAI's are (and Matryoshka models' when
 * shortened). -1 when the hidden state is not finite. */
static int pool(const srv_req *r, int dims, float *v) {
    const double scale = r->pooling == DP_POOLING_MEAN ? 1.0 / r->n_prompt : 1.0;
    double ss = 0;
    for (int j = 0; j < dims; j++) ss += (r->emb[j] * scale) * (r->emb[j] * scale);
    if (!isfinite(ss)) return -1;
    const double inv = ss > 0 ? 1.0 / sqrt(ss) : 0; /* a zero vector stays zero */
    for (int j = 0; j < dims; j++) v[j] = (float)(r->emb[j] * scale * inv);
    return 0;
}

static void answer(http_req *c, const server *S, srv_req **r, int n, const embed_opts *o) {
    float *v = malloc(sizeof *v * (size_t)o->dims);
    sbuf b = {0};
    long long tokens = 0;
    sb_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int k = 0; k < n && v && !b.oom; k++) {
        if (pool(r[k], o->dims, v)) {
            http_reply_error(c, 500, NULL, "the model's hidden state of input[%d] is not finite", k);
            goto out;
        }
        sb_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", k ? "," : "", k);
        if (o->base64) {
            put_base64(&b, v, o->dims);
        } else {
            sb_puts(&b, "[");
            for (int j = 0; j < o->dims; j++) sb_printf(&b, j ? ",%.9g" : "%.9g", (double)v[j]); /* float32, exactly */
            sb_puts(&b, "]");
        }
        sb_puts(&b, "}");
        tokens += r[k]->n_prompt;
    }
    sb_puts(&b, "],\"model\":");
    sb_json_str(&b, S->model_id, strlen(S->model_id));
    sb_printf(&b, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}\n", tokens, tokens);
    if (!v || b.oom) http_reply_error(c, 500, NULL, "out of memory for the answer");
    else http_reply(c, 200, "application/json", b.s, b.n);
out:
    sb_free(&b);
    free(v);
}

/* Waits for the submitted inputs r[0..n) and answers; releases them. */
static void wait_and_answer(http_req *c, const server *S, srv_req **r, int n, const embed_opts *o) {
    http_long_wait(c, 1);
    int k = 0, gone = 0, bad = -1; /* inputs before k have finished well */
    for (;;) {
        while (k < n && sched_done(S->q, r[k]) && !r[k]->err_status) k++;
        if (k == n) break;
        if (sched_done(S->q, r[k])) {
            bad = k;
            break;
        }
        if (sched_wait(S->q, r[0], WAIT_MS) < 0) { /* the client hung up: every input is cancelled */
            gone = 1;
            break;
        }
    }
    http_long_wait(c, 0);
    if (gone) {
        http_reply_error(c, 499, NULL, "the client closed the connection"); /* nginx's code; nobody reads it */
    } else if (bad >= 0) {
        sched_cancel(S->q, r[0]); /* the other inputs are of no use now */
        if (r[bad]->err_status == 503) http_add_header(c, "Retry-After", "1");
        http_reply_error(c, r[bad]->err_status, NULL, "input[%d]: %s", bad, r[bad]->err_msg);
    } else {
        answer(c, S, r, n, o);
    }
    for (int i = n - 1; i >= 0; i--) srv_req_release(S->q, r[i]);
    free(r);
}

void serve_embeddings(http_req *c, void *user) {
    server *S = user;
    size_t len;
    const char *body = http_body(c, &len);
    req_error e;
    cJSON *root = req_json(body, len, &e);
    if (!root) {
        http_reply_error(c, e.status, e.param[0] ? e.param : NULL, "%s", e.message);
        return;
    }
    embed_opts o;
    srv_req **r;
    int n;
    if (!cJSON_IsObject(root)) {
        http_reply_error(c, 400, NULL, "the request body must be a JSON object");
    } else if (!read_opts(c, S, root, &o) && !make_inputs(c, S, root, o.pooling, &r, &n)) {
        cJSON_Delete(root);
        root = NULL;
        char msg[200];
        const int status = sched_submit(S->q, r[0], msg, sizeof msg);
        if (status) {
            http_add_header(c, "Retry-After", "1");
            http_reply_error(c, status, NULL, "%s", msg);
            destroy_inputs(r, n);
        } else {
            wait_and_answer(c, S, r, n, &o);
        }
    }
    cJSON_Delete(root);
}

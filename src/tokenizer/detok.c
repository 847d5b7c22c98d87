/* The streaming detokenizer (dp_detok_*): token bytes held back until they
 * form complete UTF-8 sequences. */
#include <stdlib.h>
#include <string.h>

#include "../model.h"
#include "../util.h"
#include "internal.h"

/* Streaming detokenizer: bytes are held back until they form complete UTF-8
 * sequences; a byte that can never complete one becomes U+FFFD. */
struct dp_detok {
    const dp_tokenizer *t;
    int special;
    int strip_space;         /* SPM with a space prefix: drop the first leading space */
    int emitted;
    unsigned char pend[8];
    int n_pend;
};

dp_detok *dp_detok_new(const dp_model *m, int render_special) {
    dp_detok *d = dp_calloc(1, sizeof *d);
    if (!d) return NULL;
    d->t = m->tok;
    d->special = render_special;
    d->strip_space = m->tok->kind == TOK_SPM && m->tok->add_space_prefix;
    return d;
}

static void put(char *buf, int cap, int *n, const char *s, int k) {
    for (int i = 0; i < k; i++, (*n)++)
        if (*n < cap) buf[*n] = s[i];
}

/* Number of bytes of s[0..n) that continue a sequence led by s[0] validly
 * (not counting the lead), and the full length it needs. */
static int valid_prefix(const unsigned char *s, int n, int *need) {
    int k = tk_utf8_len(s[0]);
    *need = k;
    if (k <= 1) return 0;
    int ok = 0;
    for (int j = 1; j < k && j < n; j++) {
        unsigned char c = s[j];
        int lo = 0x80, hi = 0xBF;
        if (j == 1) {
            if (s[0] == 0xE0) lo = 0xA0;
            else if (s[0] == 0xED) hi = 0x9F;
            else if (s[0] == 0xF0) lo = 0x90;
            else if (s[0] == 0xF4) hi = 0x8F;
        }
        if (c < lo || c > hi) break;
        ok++;
    }
    return ok;
}

/* Emits what is complete of pending + src; keeps an incomplete but still
 * valid tail (at most 3 bytes) unless flushing. */
static int detok_feed(dp_detok *d, const char *src, int k, int flush, char *buf, int cap) {
    int total = d->n_pend + k;
    unsigned char stack[512], *all = total <= (int)sizeof stack ? stack : malloc((size_t)total);
    if (!all) return dp_set_error(DP_ERR_NOMEM, "out of memory decoding a token");
    memcpy(all, d->pend, (size_t)d->n_pend);
    if (k) memcpy(all + d->n_pend, src, (size_t)k);
    d->n_pend = 0;
    int n = 0, i = 0;
    while (i < total) {
        int need, ok = valid_prefix(all + i, total - i, &need);
        if (need == 1) {
            if (!(d->strip_space && !d->emitted && all[i] == ' ')) put(buf, cap, &n, (const char *)all + i, 1);
            i++;
        } else if (need >= 2 && ok == need - 1) {
            put(buf, cap, &n, (const char *)all + i, need);
            i += need;
        } else if (need >= 2 && i + 1 + ok == total && !flush) {
            d->n_pend = total - i;
            memcpy(d->pend, all + i, (size_t)d->n_pend);
            break;
        } else {
            put(buf, cap, &n, "\xEF\xBF\xBD", 3);
            i += need >= 2 ? 1 + ok : 1;
        }
        d->emitted = 1;
    }
    if (all != stack) free(all);
    return n;
}

int dp_detok_push(dp_detok *d, int32_t tok, char *buf, int cap) {
    char small[256];
    int k = tk_token_bytes(d->t, tok, d->special, small, sizeof small);
    if (k < 0) return k;
    char *src = small;
    if (k > (int)sizeof small) {
        src = malloc((size_t)k);
        if (!src) return dp_set_error(DP_ERR_NOMEM, "out of memory decoding a token");
        tk_token_bytes(d->t, tok, d->special, src, k);
    }
    int n = detok_feed(d, src, k, 0, buf, cap);
    if (src != small) free(src);
    return n;
}

int dp_detok_flush(dp_detok *d, char *buf, int cap) { return detok_feed(d, "", 0, 1, buf, cap); }

void dp_detok_free(dp_detok *d) { free(d); }

/* The checks that test_serve_reasoning.c and test_serve_toolcall.c share:
 * a splitter of streamed text (two outputs) must split a text fed in any
 * pieces as it splits the whole text: cut at every byte, into single
 * bytes, and at random. */
#ifndef TEST_SERVE_SPLIT_H
#define TEST_SERVE_SPLIT_H

#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "testlib.h"

/* Splits text fed in pieces cut at cuts[0..n_cuts) (ascending offsets) into a and b. */
typedef void (*split_fn)(const char *text, const size_t *cuts, int n_cuts, int opt, sbuf *a, sbuf *b);

static inline const char *sp_str(const sbuf *s) { return s->s ? s->s : ""; }

/* The split of text in pieces cut at cuts against its whole split (a, b). */
static inline void sp_same(split_fn f, const char *text, int opt, const size_t *cuts, int n_cuts, const sbuf *a,
                           const sbuf *b, const char *how) {
    sbuf a2 = {0}, b2 = {0};
    f(text, cuts, n_cuts, opt, &a2, &b2);
    CHECKF(!strcmp(sp_str(&a2), sp_str(a)) && !strcmp(sp_str(&b2), sp_str(b)), "'%s' (%d) %s: '%s' / '%s'", text, opt,
           how, sp_str(&a2), sp_str(&b2));
    sb_free(&a2);
    sb_free(&b2);
}

/* The whole split equals (want_a, want_b), and so does every cut of text. */
static inline void sp_expect(split_fn f, const char *text, int opt, const char *want_a, const char *want_b) {
    sbuf a = {0}, b = {0};
    f(text, NULL, 0, opt, &a, &b);
    CHECKF(!strcmp(sp_str(&a), want_a) && !strcmp(sp_str(&b), want_b), "'%s' (%d): '%s' / '%s', want '%s' / '%s'",
           text, opt, sp_str(&a), sp_str(&b), want_a, want_b);
    const size_t n = strlen(text);
    for (size_t k = 0; k <= n; k++) sp_same(f, text, opt, &k, 1, &a, &b, "in two pieces");
    size_t *every = malloc(sizeof *every * (n + 1));
    for (size_t k = 0; k < n; k++) every[k] = k + 1;
    sp_same(f, text, opt, every, n ? (int)n - 1 : 0, &a, &b, "byte by byte");
    free(every);
    sb_free(&a);
    sb_free(&b);
}

/* iters random texts of up to 12 fragments, each split whole and in up to 9 random pieces. */
static inline void sp_random(split_fn f, const char *const *frag, int n_frag, int iters) {
    for (int it = 0; it < iters; it++) {
        char text[1024] = "";
        const int nf = 1 + (int)(t_rand_u64() % 12);
        for (int k = 0; k < nf; k++) strcat(text, frag[t_rand_u64() % (uint64_t)n_frag]);
        const int opt = (int)(t_rand_u64() & 1);
        sbuf a = {0}, b = {0};
        f(text, NULL, 0, opt, &a, &b);
        size_t cuts[8];
        int nc = 0;
        const size_t n = strlen(text);
        for (int k = 0; k < 8 && n; k++) {
            const size_t at = (size_t)(t_rand_u64() % (n + 1));
            if (!nc || at >= cuts[nc - 1]) cuts[nc++] = at;
        }
        sp_same(f, text, opt, cuts, nc, &a, &b, "in random pieces");
        sb_free(&a);
        sb_free(&b);
    }
}

#endif

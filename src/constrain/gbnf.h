/* Constrained output by a GBNF grammar (llama.cpp's format, its
 * grammars/README.md): the parser (gbnf.c) compiles the text into rules of
 * flat element sequences, and the byte machine (gbnf_machine.c) walks them
 * over UTF-8 text. The token masks on top are constraint.c's, shared with
 * the JSON machine.
 *
 * Groups and repetitions become rules of their own, so the machine sees
 * three kinds of element: a character class, a reference to a rule, and
 * the end of an alternative. A reading of the text is a stack of element
 * positions: the class the next character must match on top, below it
 * where each rule being written returns to. */
#ifndef DP_GBNF_H
#define DP_GBNF_H

#include <stddef.h>
#include <stdint.h>

/* What a grammar may ask for: it comes from requests, so nothing in it may
 * make the parser or the machine use unbounded memory or time. */
enum {
    GB_MAX_BYTES = 1 << 18,   /* grammar text */
    GB_MAX_RULES = 8192,      /* rules, the ones groups and repetitions make included */
    GB_MAX_ELEMS = 1 << 18,   /* elements of all rules */
    GB_MAX_DEPTH = 64,        /* groups nested in groups */
    GB_MAX_REPEAT = 1000,     /* m and n of {m,n} */
};

/* The machine's limits: readings beyond them are dropped, which narrows
 * what the grammar allows, never widens it. */
enum {
    GM_STACKS = 64,   /* readings kept at once */
    GM_POOL = 4096,   /* positions of all readings together */
    GM_DEPTH = 256,   /* positions of one reading (rules being written) */
    GM_WORK = 4096,   /* readings looked at per character */
};

enum { GE_END, GE_CLASS, GE_NCLASS, GE_REF };

typedef struct {
    int32_t kind;
    int32_t a, n; /* GE_CLASS, GE_NCLASS: ranges[a .. a + n), sorted, apart; GE_REF: rule a */
} gelem;

typedef struct {
    uint32_t lo, hi; /* code points, both included */
} grange;

typedef struct {
    int32_t first, n; /* its alternatives: alts[first .. first + n), each an element index */
} grule;

typedef struct {
    gelem *elems;
    int n_elems, cap_elems;
    grange *ranges;
    int n_ranges, cap_ranges;
    int32_t *alts;
    int n_alts, cap_alts;
    grule *rules;
    int n_rules;
    int root;
    struct gwork *work; /* the machine's scratch: one thread at a time (a constraint's calls hold its lock) */
} gbnf;

/* Compiles GBNF text. Returns 0, or -1 with a one-line reason naming the
 * line and column in err. The machine's calls on G are one thread's at a
 * time (they share G's scratch). */
int gbnf_compile(gbnf *G, const char *text, size_t len, char *err, size_t errcap);
void gbnf_free(gbnf *G);

/* All readings of the text so far (none: it cannot be continued), and the
 * character being read when the text ends inside one: `need` more bytes,
 * the next in [clo, chi], the code points it can still be in [lo, hi]. */
typedef struct {
    int n, used;
    uint8_t need, clo, chi;
    uint32_t acc, lo, hi;
    int32_t off[GM_STACKS + 1]; /* reading i: pos[off[i] .. off[i + 1]), the top last */
    int32_t pos[GM_POOL];
} gstate;

/* The machine's scratch (gbnf_compile makes it): 0, or -1 out of memory. */
int gm_init(gbnf *G);
void gm_start(const gbnf *G, gstate *st);
/* Advances by one byte from src into dst (src unchanged); returns the
 * number of readings left (0: refused). */
int gm_feed_to(const gbnf *G, const gstate *src, uint8_t b, gstate *dst);
int gm_feed(const gbnf *G, gstate *st, uint8_t b);
/* Advances by n bytes (stops at the first refused one). */
int gm_feed_bytes(const gbnf *G, gstate *st, const uint8_t *p, int n);
/* 1 when the text so far is a whole root (the generation may end). */
int gm_can_end(const gstate *st);
/* 1 when it is whole and nothing may follow. */
int gm_done(const gstate *st);
void gm_copy(gstate *dst, const gstate *src);
/* The state as words that two states share exactly when they are the same
 * (the fields a reading depends on, none of the padding): a key for the
 * masks' cache. Returns the count, or -1 when it would pass cap. */
int gm_key(const gstate *st, uint32_t *out, int cap);

#endif

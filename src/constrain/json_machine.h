/* Constrained output: a JSON Schema compiled into nodes (json_schema.c) and
 * the byte machine that walks them (json_machine.c). The token masks on top
 * are in constraint.c.
 *
 * The machine accepts exactly the texts that are one JSON value the schema
 * accepts, written with no whitespace before it (but after a think block)
 * and at most JM_WS whitespace bytes in a row between tokens, enum and
 * const values of objects and arrays compact (as cJSON prints them), object
 * members in the schema's order (each property at most once,
 * the required ones all there), strings as valid UTF-8 with no surrogate
 * escapes, numbers of at most JM_DIGITS digits before and after the point
 * (as many as a double holds; a model stuck on zeros stops there) and
 * JM_EXP_DIGITS in the exponent. That is narrower than the
 * schema (every text it produces validates), never wider. Around the value
 * it takes the texts jschema's before, after, repeat, free_text and lazy
 * describe. */
#ifndef DP_JSON_MACHINE_H
#define DP_JSON_MACHINE_H

#include <stddef.h>
#include <stdint.h>

enum {
    JM_WS = 32,     /* whitespace bytes in a row */
    JM_DIGITS = 16,    /* digits of a number's integer part, and of its fraction */
    JM_EXP_DIGITS = 3, /* digits of its exponent */
    JM_DEPTH = 40,  /* frames a stack holds: nesting beyond about 19 levels is refused */
    JM_STACKS = 16, /* readings of the text kept at once (anyOf, optional members) */
};

typedef enum {
    JN_ANY,     /* any JSON value */
    JN_OBJECT,  /* props (in order) or, with none, any keys with values of node `extra` */
    JN_ARRAY,   /* items of node `items` */
    JN_STRING,
    JN_NUMBER,
    JN_INTEGER,
    JN_LITERAL, /* one of lits[first .. first + n): JSON texts, sorted bytewise */
    JN_ANYOF,   /* one of alts[first .. first + n) */
} jn_kind;

typedef struct {
    int kind;
    int first, n;              /* props / lits / alts */
    int extra;                 /* JN_OBJECT without props: the members' node */
    int items;                 /* JN_ARRAY */
    int min, max;              /* items (JN_ARRAY) or characters (JN_STRING); max -1 = none */
} jnode;

typedef struct {
    char *key; /* the key as JSON text, quotes included */
    int klen;
    int node;
    int required;
} jprop;

typedef struct {
    char *s;
    int len;
} jlit;

typedef struct {
    jnode *nodes;
    int n_nodes, cap_nodes;
    jprop *props;
    int n_props, cap_props;
    jlit *lits;
    int n_lits, cap_lits;
    int *alts;
    int n_alts, cap_alts;
    int root;
    /* nodes every schema has: any value, a generic object / array / string /
     * number, the literals true, false and null */
    int any, g_obj, g_arr, g_str, g_num, g_lit;
    /* texts written before and after the value (a tool call's tags), or
     * NULL; whitespace may come before each (jm_start sets them); with
     * both, up to `repeat` such values may follow one another (0 or 1:
     * one), whitespace between them */
    const char *before, *after;
    int repeat;
    /* free text in which each before ... after block holds a value
     * (before begins with '<', its only '<'); up to `repeat` blocks (0: any
     * number); the text may end anywhere outside a block */
    int free_text;
    /* free text, except that where its first byte but whitespace (after a
     * think block) is '{', it is from there one value of the root, then at
     * most JM_WS whitespace bytes: Llama 3.1's tool call, which is the
     * whole answer (before and after unused) */
    int lazy;
} jschema;

/* Compiles schema text (JSON Schema, the subset docs/serve.md lists); NULL
 * or "" = any JSON object (response_format json_object). Returns 0, or -1
 * with a one-line reason in err. */
int jschema_compile(jschema *S, const char *text, size_t len, char *err, size_t errcap);
void jschema_free(jschema *S);

/* One frame: a value being written (node, phase) or a member key. */
typedef struct {
    int32_t node;
    uint8_t ph;
    uint8_t aux; /* UTF-8 first continuation's range; hex digits of \u */
    uint16_t ws; /* whitespace bytes in a row */
    int32_t i;   /* member index, items, characters, literal range start */
    int32_t j;   /* pending continuation bytes, \u value, literal range end */
    int32_t k;   /* literal / key / tag position */
} jframe;

typedef struct {
    int depth;
    jframe f[JM_DEPTH];
} jstack;

/* All readings of the text so far; none = the text cannot be continued. */
typedef struct {
    int n;
    jstack s[JM_STACKS];
} jstate;

/* The start: a JSON value of the root, between S->before and S->after
 * where set; think = 1 lets the text open with a <think>...</think> block
 * (any bytes inside; S->lazy: after whitespace too), 2 starts inside one. */
void jm_start(const jschema *S, jstate *st, int think);
/* Advances by one byte; returns the number of readings left (0: refused;
 * st is then empty). */
int jm_feed(const jschema *S, jstate *st, uint8_t b);
/* The same from src into dst (src unchanged). */
int jm_feed_to(const jschema *S, const jstate *src, uint8_t b, jstate *dst);
/* Advances by n bytes (stops at the first refused one). */
int jm_feed_bytes(const jschema *S, jstate *st, const uint8_t *p, int n);
/* 1 when the text so far is a complete value (the generation may end). */
int jm_can_end(const jschema *S, const jstate *st);
/* 1 when it is complete and no byte can follow. */
int jm_done(const jschema *S, const jstate *st);
void jm_copy(jstate *dst, const jstate *src);

/* What the token masks' shortcuts need to know of the state. */
typedef struct {
    int in_string;  /* every reading inside a string, at a character boundary */
    int room;       /* characters the roomiest of those strings may still take (-1: no limit) */
    int in_think;   /* one reading, inside a think block or free text, no tag begun: a token without '<' is in */
} jm_view;
void jm_look(const jschema *S, const jstate *st, jm_view *v);
/* 1 when a reading takes any bytes from here on (S->lazy's free text):
 * every token is in. */
int jm_any(const jstate *st);

#endif

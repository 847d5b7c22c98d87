/* A JSON Schema compiled into the nodes json_machine.c walks.
 *
 * Supported: type (one or a list), properties, required,
 * additionalProperties, items, minItems, maxItems, minLength, maxLength,
 * enum, const, anyOf, allOf of one schema, $ref into the document ("#",
 * "#/$defs/...", any JSON pointer), $defs / definitions, and the
 * annotations (title, description, default, examples, ...), which constrain
 * nothing. The keywords that constrain in ways the machine cannot (pattern,
 * format, minimum, oneOf, ...) are refused by name rather than ignored: the
 * answer would not be what the caller asked for. Unknown keywords are
 * ignored, as JSON Schema says.
 *
 * What is compiled is narrower than the schema where that keeps the machine
 * simple and every answer valid: an object with properties gets only those
 * (additionalProperties is not needed for validity), in the schema's order;
 * a schema without a type but with properties (items, a length) is taken as
 * an object (array, string). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_machine.h"

/* Limits that keep a mask's cost bounded whatever a request sends: a
 * literal range is scanned byte by byte, and every node may be visited. */
enum { MAX_NEST = 64, MAX_NODES = 20000, MAX_LITERALS = 4096 };

typedef struct {
    jschema *S;
    const cJSON *doc;
    const cJSON **memo_key;
    int *memo_node;
    int n_memo, cap_memo;
    char *err;
    size_t errcap;
} comp;

/* The first error wins; a name from the schema quoted in it loses its
 * control bytes (the reason stays one line). */
static int fail(comp *c, const char *fmt, const char *a) {
    if (!c->err || !c->errcap || c->err[0]) return -1;
    char q[100];
    size_t n = 0;
    for (; a && a[n] && n + 1 < sizeof q; n++) q[n] = (unsigned char)a[n] < 0x20 || a[n] == 0x7f ? '?' : a[n];
    if (a && ((unsigned char)a[n] & 0xC0) == 0x80) /* cut inside a character: drop all of it */
        while (n > 0 && ((unsigned char)q[--n] & 0xC0) == 0x80) {}
    q[n] = 0;
    snprintf(c->err, c->errcap, fmt, q);
    return -1;
}

#define GROW(arr, n, cap)                                                                                       \
    do {                                                                                                        \
        if ((n) == (cap)) {                                                                                     \
            int nc_ = (cap) ? 2 * (cap) : 16;                                                                   \
            void *p_ = realloc((arr), sizeof(*(arr)) * (size_t)nc_);                                            \
            if (!p_) return fail(c, "%s", "out of memory");                                                   \
            (arr) = p_;                                                                                         \
            (cap) = nc_;                                                                                        \
        }                                                                                                       \
    } while (0)

static int new_node(comp *c, int kind) {
    jschema *S = c->S;
    if (S->n_nodes >= MAX_NODES) return fail(c, "%s", "the schema is too large");
    GROW(S->nodes, S->n_nodes, S->cap_nodes);
    S->nodes[S->n_nodes] = (jnode){.kind = kind, .extra = -1, .items = -1, .max = -1};
    return S->n_nodes++;
}

static int add_lit(comp *c, const char *s, int len) {
    jschema *S = c->S;
    GROW(S->lits, S->n_lits, S->cap_lits);
    char *d = malloc((size_t)len + 1);
    if (!d) return fail(c, "%s", "out of memory");
    memcpy(d, s, (size_t)len);
    d[len] = 0;
    S->lits[S->n_lits++] = (jlit){d, len};
    return 0;
}

static int lit_cmp(const void *a, const void *b) {
    const jlit *x = a, *y = b;
    int n = x->len < y->len ? x->len : y->len, r = memcmp(x->s, y->s, (size_t)n);
    return r ? r : x->len - y->len;
}

/* A literal node of the texts lits[first ..], sorted and without repeats. */
static int finish_literal(comp *c, int first) {
    jschema *S = c->S;
    int n = S->n_lits - first;
    qsort(S->lits + first, (size_t)n, sizeof(jlit), lit_cmp);
    int w = first;
    for (int r = first; r < first + n; r++) {
        if (w > first && !lit_cmp(&S->lits[w - 1], &S->lits[r])) {
            free(S->lits[r].s);
            continue;
        }
        S->lits[w++] = S->lits[r];
    }
    S->n_lits = w;
    int id = new_node(c, JN_LITERAL);
    if (id < 0) return -1;
    S->nodes[id].first = first;
    S->nodes[id].n = w - first;
    return id;
}

static int literal_of(comp *c, const char *const *texts, int n) {
    int first = c->S->n_lits;
    for (int i = 0; i < n; i++)
        if (add_lit(c, texts[i], (int)strlen(texts[i]))) return -1;
    return finish_literal(c, first);
}

/* The JSON type names a value satisfies ("integer" also for whole numbers). */
static int value_has_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    return 0;
}

static int type_ok(const cJSON *v, const cJSON *type) {
    if (!type) return 1;
    if (cJSON_IsString(type)) return value_has_type(v, type->valuestring);
    const cJSON *t;
    cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && value_has_type(v, t->valuestring)) return 1;
    return 0;
}

/* enum / const: the values as compact JSON texts (of the schema's types). */
static int compile_literal(comp *c, const cJSON *sch) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sch, "enum"), *co = cJSON_GetObjectItemCaseSensitive(sch, "const");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sch, "type");
    if (en && !cJSON_IsArray(en)) return fail(c, "%s", "'enum' must be an array");
    int first = c->S->n_lits;
    const cJSON *v;
    if (co) {
        if (en) return fail(c, "%s", "'enum' and 'const' in one schema");
        en = NULL;
    }
    for (v = co ? co : en ? en->child : NULL; v; v = co ? NULL : v->next) {
        if (!type_ok(v, type)) continue;
        char *t = cJSON_PrintUnformatted(v);
        if (!t) return fail(c, "%s", "out of memory");
        int rc = add_lit(c, t, (int)strlen(t));
        free(t);
        if (rc) return -1;
        if (co) break;
    }
    if (c->S->n_lits == first) return fail(c, "%s", "'enum' / 'const' leaves no value of the schema's type");
    if (c->S->n_lits - first > MAX_LITERALS) return fail(c, "%s", "'enum' holds more than 4096 values");
    return finish_literal(c, first);
}

static int compile(comp *c, const cJSON *sch, int nest);
static int compile_typed(comp *c, const cJSON *sch, const char *type, int nest, int slot);

static int get_count(comp *c, const cJSON *sch, const char *name, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sch, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 || v->valuedouble != (double)(int)v->valuedouble)
        return fail(c, "'%s' must be a whole number >= 0", name);
    *out = (int)v->valuedouble;
    return 0;
}

static int compile_object(comp *c, const cJSON *sch, int nest, int slot) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "%s", "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "%s", "'required' must be an array of names");
    int id = new_node(c, JN_OBJECT);
    if (id < 0) return -1;
    if (slot >= 0) c->memo_node[slot] = id; /* a $ref below may come back here */
    jschema *S = c->S;
    /* the members' schemas first (they may add props of their own), then this object's props in one run */
    int np = 0, nreq_extra = 0;
    const cJSON *p, *r;
    cJSON_ArrayForEach(p, props) np++;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return fail(c, "%s", "'required' must be an array of names");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) nreq_extra++;
    }
    int total = np + nreq_extra, *kid = malloc(sizeof(int) * (size_t)(total ? total : 1));
    if (!kid) return fail(c, "%s", "out of memory");
    int k = 0;
    cJSON_ArrayForEach(p, props) {
        if ((kid[k++] = compile(c, p, nest + 1)) < 0) {
            free(kid);
            return -1;
        }
    }
    int extra = -1;
    if (!total) {
        if (!ap || cJSON_IsTrue(ap)) extra = S->any;
        else if (!cJSON_IsFalse(ap) && (extra = compile(c, ap, nest + 1)) < 0) {
            free(kid);
            return -1;
        }
    }
    int first = S->n_props;
    k = 0;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *list = pass ? req : props;
        cJSON_ArrayForEach(p, list) {
            const char *name = pass ? p->valuestring : p->string;
            if (pass && cJSON_GetObjectItemCaseSensitive(props, name)) continue;
            int required = 0;
            cJSON_ArrayForEach(r, req) required |= !strcmp(r->valuestring, name);
            cJSON *js = cJSON_CreateString(name);
            char *key = js ? cJSON_PrintUnformatted(js) : NULL;
            cJSON_Delete(js);
            if (!key || S->n_props == S->cap_props) {
                int nc = S->cap_props ? 2 * S->cap_props : 16;
                jprop *q = key ? realloc(S->props, sizeof(jprop) * (size_t)nc) : NULL;
                if (!q) {
                    free(key);
                    free(kid);
                    return fail(c, "%s", "out of memory");
                }
                S->props = q;
                S->cap_props = nc;
            }
            S->props[S->n_props++] = (jprop){key, (int)strlen(key), pass ? S->any : kid[k++], required};
        }
    }
    free(kid);
    S->nodes[id].first = first;
    S->nodes[id].n = S->n_props - first;
    S->nodes[id].extra = extra;
    return id;
}

static int compile_typed(comp *c, const cJSON *sch, const char *type, int nest, int slot) {
    jschema *S = c->S;
    if (!strcmp(type, "object")) return compile_object(c, sch, nest, slot);
    if (!strcmp(type, "boolean")) return literal_of(c, (const char *const[]){"false", "true"}, 2);
    if (!strcmp(type, "null")) return literal_of(c, (const char *const[]){"null"}, 1);
    if (!strcmp(type, "number") || !strcmp(type, "integer"))
        return new_node(c, !strcmp(type, "number") ? JN_NUMBER : JN_INTEGER);
    int is_str = !strcmp(type, "string");
    if (!is_str && strcmp(type, "array")) return fail(c, "unknown type '%s'", type);
    int id = new_node(c, is_str ? JN_STRING : JN_ARRAY), lo = 0, hi = -1;
    if (id < 0 || get_count(c, sch, is_str ? "minLength" : "minItems", &lo) ||
        get_count(c, sch, is_str ? "maxLength" : "maxItems", &hi))
        return -1;
    if (slot >= 0) c->memo_node[slot] = id;
    if (hi >= 0 && hi < lo) return fail(c, "%s: the maximum is below the minimum", is_str ? "string" : "array");
    if (!is_str) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(sch, "items");
        int items = S->any;
        if (cJSON_IsFalse(it)) hi = 0;
        else if (it && !cJSON_IsTrue(it) && (items = compile(c, it, nest + 1)) < 0) return -1;
        if (hi == 0 && lo > 0) return fail(c, "%s", "array: 'items' false with minItems above 0");
        S->nodes[id].items = items;
    }
    S->nodes[id].min = lo;
    S->nodes[id].max = hi;
    return id;
}

static const char *const REFUSED[] = {
    "pattern",          "format",          "minimum",           "maximum",       "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf",      "uniqueItems",       "contains",      "minContains",
    "maxContains",      "prefixItems",     "patternProperties", "propertyNames", "minProperties",
    "maxProperties",    "dependentRequired", "dependentSchemas", "dependencies",  "if",
    "then",             "else",            "not",               "oneOf",         "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef",     "$recursiveRef",     "contentSchema", "additionalItems",
};

/* A JSON pointer ("#", "#/a/b~1c") into the document. */
static const cJSON *resolve(comp *c, const char *ref) {
    if (ref[0] != '#') return fail(c, "$ref '%s': only references into the schema itself ('#...')", ref), NULL;
    const cJSON *at = c->doc;
    const char *p = ref + 1;
    while (*p) {
        if (*p++ != '/') return fail(c, "$ref '%s' is not a JSON pointer", ref), NULL;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~') {
                if (p[1] != '0' && p[1] != '1') return fail(c, "$ref '%s' is not a JSON pointer", ref), NULL;
                ch = *++p == '0' ? '~' : '/';
            }
            if (n + 1 >= sizeof tok) return fail(c, "$ref '%s' is too long", ref), NULL;
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (cJSON_IsArray(at)) {
            char *end;
            long i = strtol(tok, &end, 10);
            at = *tok && !*end ? cJSON_GetArrayItem(at, (int)i) : NULL;
        } else {
            at = cJSON_IsObject(at) ? cJSON_GetObjectItemCaseSensitive(at, tok) : NULL;
        }
        if (!at) return fail(c, "$ref '%s' points at nothing", ref), NULL;
    }
    return at;
}

static int memo_put(comp *c, const cJSON *key, int node) {
    if (c->n_memo == c->cap_memo) { /* both arrays grow, then the capacity */
        const int nc = c->cap_memo ? 2 * c->cap_memo : 16;
        const cJSON **mk = realloc(c->memo_key, sizeof(*mk) * (size_t)nc);
        if (mk) c->memo_key = mk;
        int *mn = mk ? realloc(c->memo_node, sizeof(int) * (size_t)nc) : NULL;
        if (!mn) return fail(c, "%s", "out of memory");
        c->memo_node = mn;
        c->cap_memo = nc;
    }
    c->memo_key[c->n_memo] = key;
    c->memo_node[c->n_memo++] = node;
    return 0;
}

/* An anyOf node of the schemas alt[0 .. n) or, with types, of sch read as
 * each of those types; the node exists before its alternatives, which may
 * refer back to it. */
static int compile_anyof(comp *c, const cJSON *const *alt, const char *const *types, const cJSON *sch, int n, int nest,
                         int slot) {
    jschema *S = c->S;
    int id = new_node(c, JN_ANYOF), *kid = malloc(sizeof(int) * (size_t)n);
    if (id < 0 || !kid) {
        free(kid);
        return id < 0 ? -1 : fail(c, "%s", "out of memory");
    }
    if (slot >= 0) c->memo_node[slot] = id;
    for (int i = 0; i < n; i++)
        if ((kid[i] = types ? compile_typed(c, sch, types[i], nest, -1) : compile(c, alt[i], nest + 1)) < 0) {
            free(kid);
            return -1;
        }
    S->nodes[id].first = S->n_alts;
    S->nodes[id].n = n;
    for (int i = 0; i < n && id >= 0; i++) {
        if (S->n_alts == S->cap_alts) {
            int nc = S->cap_alts ? 2 * S->cap_alts : 16, *q = realloc(S->alts, sizeof(int) * (size_t)nc);
            if (!q) id = fail(c, "%s", "out of memory");
            else S->alts = q, S->cap_alts = nc;
        }
        if (id >= 0) S->alts[S->n_alts++] = kid[i];
    }
    free(kid);
    return id;
}

static int compile(comp *c, const cJSON *sch, int nest) {
    jschema *S = c->S;
    if (nest > MAX_NEST) return fail(c, "%s", "the schema nests deeper than 64 levels");
    if (cJSON_IsTrue(sch)) return S->any;
    if (cJSON_IsFalse(sch)) return fail(c, "%s", "a schema of false accepts nothing");
    if (!cJSON_IsObject(sch)) return fail(c, "%s", "a schema must be an object or a boolean");
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo_key[i] == sch) {
            if (c->memo_node[i] < 0) return fail(c, "%s", "a $ref cycle that never reaches a value");
            return c->memo_node[i];
        }
    for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++)
        if (cJSON_GetObjectItemCaseSensitive(sch, REFUSED[i]))
            return fail(c, "the schema keyword '%s' is not supported in constrained output", REFUSED[i]);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(sch, "$ref"), *any = cJSON_GetObjectItemCaseSensitive(sch, "anyOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(sch, "allOf"), *type = cJSON_GetObjectItemCaseSensitive(sch, "type");
    int slot = c->n_memo;
    if (memo_put(c, sch, -1)) return -1; /* a $ref back here before a node exists is a cycle */
    int id;
    if (ref || all) {
        const cJSON *to;
        if (ref && !cJSON_IsString(ref)) return fail(c, "%s", "'$ref' must be a string");
        if (all && (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1))
            return fail(c, "%s", "'allOf' is supported with one schema only");
        if ((ref && all) || any || type || cJSON_GetObjectItemCaseSensitive(sch, "properties") ||
            cJSON_GetObjectItemCaseSensitive(sch, "enum") || cJSON_GetObjectItemCaseSensitive(sch, "items"))
            return fail(c, "'%s' beside other constraining keywords is not supported", ref ? "$ref" : "allOf");
        if (!(to = ref ? resolve(c, ref->valuestring) : all->child)) return -1;
        id = compile(c, to, nest + 1);
    } else if (any) {
        int n = cJSON_GetArraySize(any);
        if (!cJSON_IsArray(any) || n < 1) return fail(c, "%s", "'anyOf' must be a non-empty array");
        if (type || cJSON_GetObjectItemCaseSensitive(sch, "properties") || cJSON_GetObjectItemCaseSensitive(sch, "enum"))
            return fail(c, "%s", "'anyOf' beside other constraining keywords is not supported");
        const cJSON **alt = malloc(sizeof(*alt) * (size_t)n), *a;
        if (!alt) return fail(c, "%s", "out of memory");
        int k = 0;
        cJSON_ArrayForEach(a, any) alt[k++] = a;
        id = compile_anyof(c, alt, NULL, NULL, n, nest, slot);
        free(alt);
    } else if (cJSON_GetObjectItemCaseSensitive(sch, "enum") || cJSON_GetObjectItemCaseSensitive(sch, "const")) {
        id = compile_literal(c, sch);
    } else if (cJSON_IsArray(type)) {
        int n = cJSON_GetArraySize(type), k = 0;
        if (n < 1 || n > 7) return fail(c, "%s", "'type' must name one to seven types");
        const char *names[7];
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t)) return fail(c, "%s", "'type' must be a string or an array of strings");
            names[k++] = t->valuestring;
        }
        id = n == 1 ? compile_typed(c, sch, names[0], nest, slot) : compile_anyof(c, NULL, names, sch, n, nest, slot);
    } else if (type) {
        if (!cJSON_IsString(type)) return fail(c, "%s", "'type' must be a string or an array of strings");
        id = compile_typed(c, sch, type->valuestring, nest, slot);
    } else {
        static const char *const OBJ[] = {"properties", "required", "additionalProperties"};
        static const char *const ARR[] = {"items", "minItems", "maxItems"};
        const char *t = NULL;
        for (int i = 0; i < 3 && !t; i++)
            if (cJSON_GetObjectItemCaseSensitive(sch, OBJ[i])) t = "object";
            else if (cJSON_GetObjectItemCaseSensitive(sch, ARR[i])) t = "array";
        if (!t && (cJSON_GetObjectItemCaseSensitive(sch, "minLength") || cJSON_GetObjectItemCaseSensitive(sch, "maxLength")))
            t = "string";
        id = t ? compile_typed(c, sch, t, nest, slot) : S->any;
    }
    if (id >= 0) c->memo_node[slot] = id;
    return id;
}

void jschema_free(jschema *S) {
    for (int i = 0; i < S->n_props; i++) free(S->props[i].key);
    for (int i = 0; i < S->n_lits; i++) free(S->lits[i].s);
    free(S->nodes);
    free(S->props);
    free(S->lits);
    free(S->alts);
    memset(S, 0, sizeof *S);
}

int jschema_compile(jschema *S, const char *text, size_t len, char *err, size_t errcap) {
    memset(S, 0, sizeof *S);
    if (err && errcap) err[0] = 0;
    comp c = {.S = S, .err = err, .errcap = errcap};
    cJSON *doc = NULL;
    int rc = -1;
    if ((S->any = new_node(&c, JN_ANY)) < 0 || (S->g_str = new_node(&c, JN_STRING)) < 0 ||
        (S->g_num = new_node(&c, JN_NUMBER)) < 0 ||
        (S->g_lit = literal_of(&c, (const char *const[]){"false", "null", "true"}, 3)) < 0 ||
        (S->g_arr = new_node(&c, JN_ARRAY)) < 0 || (S->g_obj = new_node(&c, JN_OBJECT)) < 0)
        goto out;
    S->nodes[S->g_arr].items = S->any;
    S->nodes[S->g_obj].extra = S->any;
    if (!text || !len) {
        S->root = S->g_obj;
        rc = 0;
        goto out;
    }
    if (!(doc = cJSON_ParseWithLength(text, len))) {
        fail(&c, "%s", "the schema is not valid JSON");
        goto out;
    }
    c.doc = doc;
    if ((S->root = compile(&c, doc, 0)) >= 0) rc = 0;
out:
    cJSON_Delete(doc);
    free(c.memo_key);
    free(c.memo_node);
    if (rc) jschema_free(S);
    return rc;
}

/* Tool calls out of a chat answer (see toolcall.h). */
#include "toolcall.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

void calls_init(call_split *c, int format) {
    memset(c, 0, sizeof *c);
    c->format = format;
}

int tools_format(const char *t) {
    if (!t) return TOOLS_NONE;
    if (strstr(t, OPEN)) return TOOLS_TAGGED;
    if (strstr(t, "\"parameters\": dictionary of argument name")) return TOOLS_JSON; /* Llama 3.1's wording */
    return TOOLS_NONE;
}

void calls_free(call_split *c) {
    for (int i = 0; i < c->n_calls; i++) free(c->calls[i].name), free(c->calls[i].arguments);
    free(c->calls);
    sb_free(&c->hold);
    sb_free(&c->ws);
    sb_free(&c->name);
    sb_free(&c->args);
    sb_free(&c->num);
    memset(c, 0, sizeof *c);
}

static int is_space(char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* Appends the call (nm, a: malloc'ed, taken over; NULL: out of memory). */
static void push_call(call_split *c, char *nm, char *a) {
    if (c->n_calls == c->cap_calls) {
        const int cap = c->cap_calls ? 2 * c->cap_calls : 4;
        tool_call *nc = realloc(c->calls, sizeof *nc * (size_t)cap);
        if (nc) c->calls = nc, c->cap_calls = cap;
    }
    if (!a || !nm || c->n_calls == c->cap_calls) {
        free(a), free(nm);
        c->oom = 1; /* dropped, not shown as text: the request reports out of memory */
        return;
    }
    c->calls[c->n_calls++] = (tool_call){nm, a};
}

/* The block's text as a call: {"name": string, "arguments": any} (or
 * "parameters", Llama's word); 0 when it is not one. */
static int add_call(call_split *c, const char *body, size_t n) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    while (j && end < body + n && is_space(*end)) end++;
    if (j && end != body + n) { /* text after the object: not a call */
        cJSON_Delete(j);
        return 0;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(j);
        return 0;
    }
    char *a = !args ? dup_n("{}", 2) : cJSON_IsString(args) ? dup_n(args->valuestring, strlen(args->valuestring))
                                                            : cJSON_PrintUnformatted(args);
    char *nm = dup_n(name->valuestring, strlen(name->valuestring));
    cJSON_Delete(j);
    push_call(c, nm, a);
    return 1;
}

/* ------------------------------------------------- a call as it is written
 *
 * A sure split reads a block's JSON object byte by byte: the first "name"
 * member's string, decoded, and the arguments, written out compactly as
 * they come. Which text the arguments are: the model's own would be
 * simpler to pass on, but a call's arguments have always been
 * cJSON_PrintUnformatted's text (add_call), and a client must get the same
 * arguments for the same answer whether it streams or not, constrained or
 * not. So this writes what cJSON prints for the value it parses:
 * whitespace dropped, strings decoded and escaped again as cJSON escapes
 * them (up to a \u0000, where cJSON's string ends), numbers once complete,
 * read and printed by cJSON itself (1.0 is 1, 1e2 is 100). It follows the
 * JSON a constraint writes; text it cannot follow (not JSON, nesting deeper
 * than cJSON's limit, which cJSON does not parse either) leaves it
 * "broken", where it stopped. */

enum { SC_START, SC_MEMBER, SC_KEY, SC_COLON, SC_ITEM, SC_VALUE, SC_NEXT, SC_STR, SC_NUM, SC_LIT, SC_DONE, SC_BROKEN };
enum { SINK_SKIP, SINK_NAME, SINK_ARGS };
#define MAX_DEPTH CJSON_NESTING_LIMIT
_Static_assert(8 * sizeof ((call_scan *)0)->arr >= MAX_DEPTH, "call_scan.arr: a bit per level cJSON may open");

static void emit(call_split *c, const char *s, size_t n) {
    if (c->scan.sink == SINK_ARGS) sb_add(&c->args, s, n);
}

/* A decoded byte of a string: to the key, the name or the arguments
 * (escaped as cJSON prints a string). */
static void str_byte(call_split *c, unsigned char b) {
    call_scan *s = &c->scan;
    if (s->cut) return; /* past a \u0000, where cJSON's string ended */
    if (!b) {
        s->cut = 1;
        return;
    }
    if (s->in_key && s->depth == 1) {
        if (s->key_n < (int)sizeof s->key) s->key[s->key_n++] = (char)b;
    } else if (s->sink == SINK_NAME) {
        sb_add(&c->name, (const char *)&b, 1);
    } else if (s->sink != SINK_ARGS) {
        return;
    } else if (s->raw || (b > 31 && b != '"' && b != '\\')) {
        sb_add(&c->args, (const char *)&b, 1);
    } else {
        const char *e = b == '"' ? "\\\"" : b == '\\' ? "\\\\" : b == '\b' ? "\\b" : b == '\f' ? "\\f"
                        : b == '\n' ? "\\n" : b == '\r' ? "\\r" : b == '\t' ? "\\t" : NULL;
        if (e) sb_add(&c->args, e, 2);
        else sb_printf(&c->args, "\\u%04x", b);
    }
}

/* A \u escape's code point, in UTF-8. */
static void str_code(call_split *c, unsigned cp) {
    unsigned char u[4];
    const int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (int k = n - 1; k > 0; k--) u[k] = (unsigned char)(0x80 | (cp & 0x3F)), cp >>= 6;
    u[0] = (unsigned char)(n == 1 ? cp : n == 2 ? 0xC0 | cp : n == 3 ? 0xE0 | cp : 0xF0 | cp);
    for (int k = 0; k < n; k++) str_byte(c, u[k]);
}

static int is_arr(const call_scan *s) { return s->arr[(s->depth - 1) / 8] >> ((s->depth - 1) % 8) & 1; }

static void open_box(call_split *c, int arr) {
    call_scan *s = &c->scan;
    if (s->depth == MAX_DEPTH) {
        s->ph = SC_BROKEN;
        return;
    }
    const int k = s->depth++;
    if (arr) s->arr[k / 8] |= (unsigned char)(1u << k % 8);
    else s->arr[k / 8] &= (unsigned char)~(1u << k % 8);
    emit(c, arr ? "[" : "{", 1);
    s->ph = arr ? SC_ITEM : SC_MEMBER;
}

/* A value ended; at the top, a member of the call's object did. */
static void value_end(call_split *c) {
    call_scan *s = &c->scan;
    s->ph = SC_NEXT;
    if (s->depth > 1) return;
    if (s->sink == SINK_NAME) s->named = c->name.n > 0; /* cJSON's valuestring, up to a \u0000: not empty */
    s->sink = SINK_SKIP, s->raw = 0;
}

static void close_box(call_split *c, char b) {
    call_scan *s = &c->scan;
    if ((b == ']') != is_arr(s)) {
        s->ph = SC_BROKEN;
        return;
    }
    emit(c, &b, 1);
    if (--s->depth) value_end(c);
    else s->ph = SC_DONE;
}

static int key_is(const call_scan *s, const char *w) {
    return s->key_n == (int)strlen(w) && !memcmp(s->key, w, (size_t)s->key_n);
}

/* A top-level key read: where its value goes. cJSON's lookup finds a key's
 * first member; add_call takes "arguments" over "parameters", this the
 * format's own word over the other, held back until the object ends
 * without it: the only one its constraint writes, so that Llama's
 * "parameters" go out as they come. */
static void member(call_split *c) {
    call_scan *s = &c->scan;
    const char *own = c->format == TOOLS_JSON ? "parameters" : "arguments";
    const char *other = c->format == TOOLS_JSON ? "arguments" : "parameters";
    s->sink = SINK_SKIP;
    if (key_is(s, "name") && !s->name_seen) {
        s->name_seen = 1, s->sink = SINK_NAME;
    } else if (key_is(s, own) && s->args_key != 1) {
        if (c->args.oom) c->oom = 1;
        sb_clear(&c->args); /* the other word's value, never sent */
        s->args_key = 1, s->sink = SINK_ARGS;
    } else if (key_is(s, other) && !s->args_key) {
        s->args_key = 2, s->sink = SINK_ARGS;
    }
}

static void str_start(call_split *c, int key) {
    call_scan *s = &c->scan;
    s->ph = SC_STR, s->in_key = key, s->key_n = 0, s->esc = 0, s->cut = 0, s->hi = 0;
    if (!s->raw && !(key && s->depth == 1)) emit(c, "\"", 1);
}

static void str_end(call_split *c) {
    call_scan *s = &c->scan;
    if (!s->raw && !(s->in_key && s->depth == 1)) emit(c, "\"", 1);
    if (!s->in_key) {
        value_end(c);
        return;
    }
    if (s->depth == 1) member(c);
    s->in_key = 0, s->ph = SC_COLON;
}

static int hex_val(unsigned char b) {
    return b >= '0' && b <= '9'   ? b - '0'
           : b >= 'a' && b <= 'f' ? b - 'a' + 10
           : b >= 'A' && b <= 'F' ? b - 'A' + 10
                                  : -1;
}

/* A byte inside a string: esc 1 after a backslash, 2 in \u's digits, 3 and
 * 4 the \ and u of a high surrogate's low half (cJSON's rules). */
static void str_in(call_split *c, unsigned char b) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    call_scan *s = &c->scan;
    const char *at = b ? strchr(from, b) : NULL;
    int h;
    switch (s->esc) {
    case 0:
        if (b == '"') str_end(c);
        else if (b == '\\') s->esc = 1;
        else str_byte(c, b);
        return;
    case 1:
        if (b == 'u') s->esc = 2, s->hex = 0, s->u = 0;
        else if (at) s->esc = 0, str_byte(c, (unsigned char)to[at - from]);
        else s->ph = SC_BROKEN;
        return;
    case 2:
        if ((h = hex_val(b)) < 0) {
            s->ph = SC_BROKEN;
            return;
        }
        s->u = 16 * s->u + (unsigned)h;
        if (++s->hex < 4) return;
        s->esc = 0;
        if (s->hi ? s->u < 0xDC00 || s->u > 0xDFFF : s->u >= 0xDC00 && s->u <= 0xDFFF) s->ph = SC_BROKEN;
        else if (s->hi) str_code(c, 0x10000 + ((s->hi & 0x3FF) << 10 | (s->u & 0x3FF))), s->hi = 0;
        else if (s->u >= 0xD800 && s->u <= 0xDBFF) s->hi = s->u, s->esc = 3;
        else str_code(c, s->u);
        return;
    case 3:
        if (b == '\\') s->esc = 4;
        else s->ph = SC_BROKEN;
        return;
    default:
        if (b == 'u') s->esc = 2, s->hex = 0, s->u = 0;
        else s->ph = SC_BROKEN;
        return;
    }
}

/* A value's first byte; a top-level member's value: a name must be a
 * string, string arguments are taken as the text they hold (add_call). */
static void value_start(call_split *c, char b) {
    call_scan *s = &c->scan;
    if (s->depth == 1) {
        if (s->sink == SINK_NAME && b != '"') s->sink = SINK_SKIP;
        s->raw = s->sink == SINK_ARGS && b == '"';
    }
    if (b == '{' || b == '[') {
        open_box(c, b == '[');
    } else if (b == '"') {
        str_start(c, 0);
    } else if (b == '-' || (b >= '0' && b <= '9')) {
        s->ph = SC_NUM;
        sb_clear(&c->num);
        sb_add(&c->num, &b, 1);
    } else {
        s->lit = b == 't' ? "true" : b == 'f' ? "false" : b == 'n' ? "null" : NULL;
        s->ph = s->lit ? SC_LIT : SC_BROKEN, s->lit_k = 1;
    }
}

static int num_char(char b) { return (b >= '0' && b <= '9') || (b && strchr("+-eE.", b)); }

/* A number's text complete: read as cJSON reads it (strtod over the
 * characters it gathers; the server keeps the C locale) and printed by
 * cJSON. */
static void num_end(call_split *c) {
    call_scan *s = &c->scan;
    if (c->num.oom) { /* the request reports out of memory */
        c->oom = 1, s->ph = SC_BROKEN;
        return;
    }
    char *end, buf[64];
    const double d = strtod(c->num.s, &end);
    cJSON item;
    memset(&item, 0, sizeof item);
    item.type = cJSON_Number;
    cJSON_SetNumberHelper(&item, d);
    if (end != c->num.s + c->num.n || (s->sink == SINK_ARGS && !cJSON_PrintPreallocated(&item, buf, sizeof buf, 0))) {
        s->ph = SC_BROKEN;
        return;
    }
    if (s->sink == SINK_ARGS) sb_puts(&c->args, buf);
    value_end(c);
}

static void scan_byte(call_split *c, char b) {
    call_scan *s = &c->scan;
    switch (s->ph) {
    case SC_STR: str_in(c, (unsigned char)b); return;
    case SC_NUM:
        if (!num_char(b)) {
            num_end(c);
            if (s->ph == SC_NEXT) scan_byte(c, b); /* the byte after the number */
        } else {
            sb_add(&c->num, &b, 1);
        }
        return;
    case SC_LIT:
        if (b != s->lit[s->lit_k]) {
            s->ph = SC_BROKEN;
        } else if (!s->lit[++s->lit_k]) {
            emit(c, s->lit, (size_t)s->lit_k);
            value_end(c);
        }
        return;
    case SC_DONE:
    case SC_BROKEN: return;
    default: break;
    }
    /* between tokens cJSON skips every byte up to the space (NUL and control bytes too): the same here, so that a
     * call read as written is the call add_call's whole parse finds */
    if ((unsigned char)b <= ' ') return;
    switch (s->ph) {
    case SC_START:
        if (b == '{') open_box(c, 0);
        else s->ph = SC_BROKEN;
        return;
    case SC_MEMBER:
    case SC_KEY:
        if (b == '"') str_start(c, 1);
        else if (b == '}' && s->ph == SC_MEMBER) close_box(c, b);
        else s->ph = SC_BROKEN;
        return;
    case SC_COLON:
        if (b != ':') {
            s->ph = SC_BROKEN;
            return;
        }
        if (s->depth > 1) emit(c, ":", 1);
        s->ph = SC_VALUE;
        return;
    case SC_ITEM:
        if (b == ']') close_box(c, b);
        else value_start(c, b);
        return;
    case SC_VALUE: value_start(c, b); return;
    default: /* SC_NEXT */
        if (b == ',') {
            emit(c, ",", 1); /* none between the call's members: their values' sink ends with them */
            s->ph = is_arr(s) ? SC_VALUE : SC_KEY;
        } else if (b == '}' || b == ']') {
            close_box(c, b);
        } else {
            s->ph = SC_BROKEN;
        }
    }
}

/* Nothing read of the next block yet. */
static void scan_reset(call_split *c) {
    if (c->name.oom || c->args.oom || c->num.oom) c->oom = 1;
    memset(&c->scan, 0, sizeof c->scan);
    sb_clear(&c->name);
    sb_clear(&c->args);
    sb_clear(&c->num);
    c->ready = 0;
}

/* Bytes at the end of b that begin a character still incomplete: a
 * fragment cut there would turn it into U+FFFD on both sides. */
static size_t open_char(const sbuf *b) {
    for (size_t k = 1; k <= 3 && k <= b->n; k++) {
        const unsigned char u = (unsigned char)b->s[b->n - k];
        if ((u & 0xC0) == 0x80) continue;
        const size_t len = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : u >= 0xC0 ? 2 : 1;
        return len > k ? k : 0;
    }
    return 0;
}

/* The call read as it was written to c->calls. A whole one without
 * arguments has {}, as add_call gives; one the answer cut (its JSON never
 * ended) has the arguments as far as they were written out: what a stream
 * may send of them (no half character; a number, literal or escape not yet
 * complete is left out), so that its deltas add up to them, and "" before
 * they began. */
static void commit(call_split *c, int cut) {
    const size_t n = cut ? c->args.n - open_char(&c->args) : c->args.n;
    push_call(c, dup_n(c->name.s, c->name.n), c->scan.args_key ? dup_n(c->args.s ? c->args.s : "", n)
                                              : dup_n(cut ? "" : "{}", cut ? 0 : 2));
    if (cut) c->cut = 1;
}

/* Whether hold may still become OPEN. */
static int may_open(const sbuf *h) { return h->n <= sizeof OPEN - 1 && !memcmp(h->s, OPEN, h->n); }

/* TOOLS_JSON: an answer opening with '{' is held whole; anything else is content. */
static void json_byte(call_split *c, char ch, sbuf *content) {
    if (c->in_call) {
        sb_add(&c->hold, &ch, 1);
        if (c->sure) scan_byte(c, ch);
    } else if (c->plain) {
        sb_add(content, &ch, 1);
    } else if (is_space(ch)) {
        sb_add(&c->ws, &ch, 1);
    } else if (ch == '{') {
        c->in_call = 1;
        sb_add(&c->hold, &ch, 1);
        if (c->sure) scan_byte(c, ch);
    } else {
        c->plain = 1;
        sb_add(content, c->ws.s, c->ws.n);
        sb_clear(&c->ws);
        sb_add(content, &ch, 1);
    }
}

static void byte(call_split *c, char ch, sbuf *content) {
    if (c->format == TOOLS_JSON) {
        json_byte(c, ch, content);
        return;
    }
    if (c->in_call) {
        sb_add(&c->hold, &ch, 1);
        if (c->sure) scan_byte(c, ch);
        /* in a sure split, a </tool_call> inside the call's JSON (a string's text) does not close it */
        if (c->sure && c->scan.ph != SC_DONE && c->scan.ph != SC_BROKEN) return;
        const size_t k = sizeof CLOSE - 1;
        if (c->hold.n < k || memcmp(c->hold.s + c->hold.n - k, CLOSE, k)) return;
        const size_t body = c->hold.n - k;
        c->in_call = 0;
        /* a named call read as written stays one, as its first delta may have gone out */
        const int named = c->sure && c->scan.named;
        if (named) commit(c, 0);
        scan_reset(c);
        if (named || add_call(c, c->hold.s, body)) {
            sb_clear(&c->ws); /* the whitespace before the block */
        } else { /* not a call: the block is text */
            sb_add(content, c->ws.s, c->ws.n);
            sb_clear(&c->ws);
            sb_puts(content, OPEN);
            sb_add(content, c->hold.s, c->hold.n);
        }
        sb_clear(&c->hold);
        return;
    }
    if (!c->hold.n && is_space(ch)) {
        sb_add(&c->ws, &ch, 1);
        return;
    }
    sb_add(&c->hold, &ch, 1);
    if (may_open(&c->hold)) {
        if (c->hold.n == sizeof OPEN - 1) c->in_call = 1, sb_clear(&c->hold);
        return;
    }
    /* not a tag: the held whitespace and text are content; a '<' that ends the
     * hold may start the tag again */
    const int relaunch = c->hold.n > 1 && ch == '<';
    sb_add(content, c->ws.s, c->ws.n);
    sb_clear(&c->ws);
    sb_add(content, c->hold.s, c->hold.n - (size_t)relaunch);
    sb_clear(&c->hold);
    if (relaunch) sb_add(&c->hold, &ch, 1);
}

void calls_feed(call_split *c, const char *s, size_t n, sbuf *content) {
    for (size_t i = 0; i < n; i++) byte(c, s[i], content);
    if (c->hold.oom || c->ws.oom || c->name.oom || c->args.oom || c->num.oom) c->oom = 1;
    if (c->sure) c->ready = c->scan.args_key == 1 ? c->args.n - open_char(&c->args) : 0;
}

void calls_flush(call_split *c, sbuf *content) {
    /* a sure split's open call whose name it read is a call, whole or cut: a stream may have sent its start,
     * and the answer not streamed must show the same call */
    const int named = c->in_call && c->sure && c->scan.named;
    if (named) commit(c, c->scan.ph != SC_DONE);
    if (c->format == TOOLS_JSON) {
        size_t n = c->hold.n;
        while (n > 0 && is_space(c->hold.s[n - 1])) n--;
        if (!named && (!c->in_call || !add_call(c, c->hold.s, n))) {
            sb_add(content, c->ws.s, c->ws.n); /* not a call: the answer as it came */
            sb_add(content, c->hold.s, c->hold.n);
        }
        scan_reset(c);
        c->in_call = 0;
        sb_clear(&c->hold);
        sb_clear(&c->ws);
        return;
    }
    if (c->in_call) { /* left open: text, unless it is a call */
        if (!named) {
            sb_add(content, c->ws.s, c->ws.n);
            sb_puts(content, OPEN);
            sb_add(content, c->hold.s, c->hold.n);
        }
        scan_reset(c);
    } else {
        if (!c->n_calls || c->hold.n) sb_add(content, c->ws.s, c->ws.n);
        sb_add(content, c->hold.s, c->hold.n);
    }
    c->in_call = 0;
    sb_clear(&c->hold);
    sb_clear(&c->ws);
}

int calls_next(call_split *c, call_delta *d) {
    for (;;) {
        const int k = c->taken, done = k < c->n_calls;
        d->index = k, d->name = NULL;
        if (!c->sure) { /* the whole call at once */
            if (!done) return 0;
            d->name = c->calls[k].name, d->args = c->calls[k].arguments, d->n = strlen(d->args);
            c->taken++;
            return 1;
        }
        if (!done && !c->scan.named) return 0;
        if (!c->shown) { /* OpenAI's first delta: id, type and name, arguments "" */
            c->shown = 1;
            d->name = done ? c->calls[k].name : c->name.s, d->args = "", d->n = 0;
            return 1;
        }
        const char *a = done ? c->calls[k].arguments : c->args.s;
        const size_t end = done ? strlen(a) : c->ready;
        if (end > c->sent) {
            d->args = a + c->sent, d->n = end - c->sent;
            c->sent = end;
            return 1;
        }
        if (!done) return 0;
        c->taken++, c->shown = 0, c->sent = 0;
    }
}

char *calls_schema(const char *tools_json, const char *name, int format, const char **before, const char **after) {
    *before = format == TOOLS_TAGGED ? "<tool_call>" : NULL;
    *after = format == TOOLS_TAGGED ? "</tool_call>" : NULL;
    const char *key = format == TOOLS_TAGGED ? "arguments" : "parameters";
    cJSON *tools = cJSON_Parse(tools_json), *alts = cJSON_CreateArray(), *tool;
    char *out = NULL;
    int ok = tools && alts;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *fname = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (!ok || !cJSON_IsString(fname) || (name && strcmp(fname->valuestring, name))) continue;
        cJSON *alt = cJSON_CreateObject(), *props = cJSON_CreateObject(), *nm = cJSON_CreateObject();
        cJSON *req = cJSON_CreateArray();
        ok = alt && props && nm && req && cJSON_AddStringToObject(alt, "type", "object") &&
             cJSON_AddStringToObject(nm, "const", fname->valuestring) && cJSON_AddItemToObject(props, "name", nm);
        if (ok) nm = NULL;
        /* a function without parameters takes an object, as OpenAI's arguments always are */
        cJSON *ps = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
        ok = ok && ps && (params || cJSON_AddStringToObject(ps, "type", "object")) && cJSON_AddItemToObject(props, key, ps);
        if (!ok) cJSON_Delete(ps);
        ok = ok && cJSON_AddItemToObject(alt, "properties", props);
        if (ok) props = NULL;
        ok = ok && cJSON_AddItemToArray(req, cJSON_CreateString("name")) &&
             cJSON_AddItemToArray(req, cJSON_CreateString(key)) && cJSON_AddItemToObject(alt, "required", req);
        if (ok) req = NULL;
        ok = ok && cJSON_AddItemToArray(alts, alt);
        if (!ok) cJSON_Delete(alt);
        cJSON_Delete(props);
        cJSON_Delete(nm);
        cJSON_Delete(req);
    }
    if (ok && cJSON_GetArraySize(alts)) {
        cJSON *sch = cJSON_CreateObject();
        if (sch && cJSON_AddItemToObject(sch, "anyOf", alts)) {
            alts = NULL;
            out = cJSON_PrintUnformatted(sch);
        }
        cJSON_Delete(sch);
    }
    cJSON_Delete(alts);
    cJSON_Delete(tools);
    return out;
}

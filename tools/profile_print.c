/* Profile tables for --profile (bench and run). */
#include "profile_print.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *op;
    int layer;
    uint64_t calls, bytes;
    double ms;
} cell;

struct prof_acc {
    cell *c;
    int n, cap;
};

prof_acc *prof_acc_new(void) { return calloc(1, sizeof(prof_acc)); }

void prof_acc_free(prof_acc *a) {
    if (!a) return;
    free(a->c);
    free(a);
}

void prof_acc_add(prof_acc *a, const dp_profile_entry *e, int n) {
    for (int i = 0; i < n; i++) {
        cell *c = NULL;
        for (int k = 0; k < a->n && !c; k++)
            if (a->c[k].layer == e[i].layer && strcmp(a->c[k].op, e[i].op) == 0) c = &a->c[k];
        if (!c) {
            if (a->n == a->cap) {
                int cap = a->cap ? a->cap * 2 : 256;
                cell *nc = realloc(a->c, sizeof(cell) * (size_t)cap);
                if (!nc) return;
                a->c = nc;
                a->cap = cap;
            }
            c = &a->c[a->n++];
            memset(c, 0, sizeof *c);
            c->op = e[i].op;
            c->layer = e[i].layer;
        }
        c->calls += e[i].calls;
        c->bytes += e[i].bytes;
        c->ms += e[i].total_ms;
    }
}

void prof_acc_add_session(prof_acc *a, const dp_session *s) {
    int cap = 4096;
    dp_profile_entry *e = malloc(sizeof(dp_profile_entry) * (size_t)cap);
    if (!e) return;
    int n = dp_session_get_profile(s, e, cap);
    prof_acc_add(a, e, n);
    free(e);
}

double prof_acc_total_ms(const prof_acc *a) {
    double t = 0;
    for (int i = 0; i < a->n; i++) t += a->c[i].ms;
    return t;
}

/* Sums over layers (by op) or over ops (by layer). */
typedef struct {
    const char *op;
    int layer;
    uint64_t calls, bytes;
    double ms;
} row;

static int by_ms_desc(const void *x, const void *y) {
    double a = ((const row *)x)->ms, b = ((const row *)y)->ms;
    return a < b ? 1 : a > b ? -1 : 0;
}

static int group(const prof_acc *a, int by_layer, row *out) {
    int n = 0;
    for (int i = 0; i < a->n; i++) {
        const cell *c = &a->c[i];
        row *r = NULL;
        for (int k = 0; k < n && !r; k++)
            if (by_layer ? out[k].layer == c->layer : strcmp(out[k].op, c->op) == 0) r = &out[k];
        if (!r) {
            r = &out[n++];
            memset(r, 0, sizeof *r);
            r->op = c->op;
            r->layer = c->layer;
        }
        r->calls += c->calls;
        r->bytes += c->bytes;
        r->ms += c->ms;
    }
    qsort(out, (size_t)n, sizeof(row), by_ms_desc);
    return n;
}

static double gbps(const row *r) { return r->bytes && r->ms > 0 ? r->bytes / (r->ms * 1e-3) / 1e9 : 0; }

void prof_print(FILE *out, const char *title, const prof_acc *a, int n_tokens) {
    double total = prof_acc_total_ms(a);
    row *r = calloc((size_t)a->n + 1, sizeof(row));
    if (!r) return;
    if (n_tokens) fprintf(out, "\n%s: %.1f ms over %d tokens\n", title, total, n_tokens);
    else fprintf(out, "\n%s: %.1f ms\n", title, total);
    fprintf(out, "  %-16s %10s %12s %7s %11s %9s\n", "op", "calls", "total ms", "share", "ms/token", "GB/s");
    int n = group(a, 0, r);
    for (int i = 0; i < n; i++) {
        fprintf(out, "  %-16s %10llu %12.2f %6.1f%% %11.3f", r[i].op, (unsigned long long)r[i].calls, r[i].ms,
                total > 0 ? 100 * r[i].ms / total : 0, n_tokens ? r[i].ms / n_tokens : 0);
        if (r[i].bytes) fprintf(out, " %9.2f", gbps(&r[i]));
        fprintf(out, "\n");
    }
    n = group(a, 1, r);
    fprintf(out, "  %-16s %10s %12s %7s %11s %9s\n", "layer", "calls", "total ms", "share", "ms/token", "GB/s");
    for (int i = 0; i < n; i++) {
        char nm[32];
        if (r[i].layer < 0) snprintf(nm, sizeof nm, "(outside)");
        else snprintf(nm, sizeof nm, "%d", r[i].layer);
        fprintf(out, "  %-16s %10llu %12.2f %6.1f%% %11.3f", nm, (unsigned long long)r[i].calls, r[i].ms,
                total > 0 ? 100 * r[i].ms / total : 0, n_tokens ? r[i].ms / n_tokens : 0);
        if (r[i].bytes) fprintf(out, " %9.2f", gbps(&r[i]));
        fprintf(out, "\n");
    }
    free(r);
}

cJSON *prof_to_json(const prof_acc *a) {
    double total = prof_acc_total_ms(a);
    row *r = calloc((size_t)a->n + 1, sizeof(row));
    cJSON *o = cJSON_CreateObject();
    if (!r || !o) {
        free(r);
        return o;
    }
    cJSON_AddNumberToObject(o, "total_ms", total);
    cJSON *ops = cJSON_AddArrayToObject(o, "ops");
    int n = group(a, 0, r);
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", r[i].op);
        cJSON_AddNumberToObject(e, "calls", (double)r[i].calls);
        cJSON_AddNumberToObject(e, "total_ms", r[i].ms);
        cJSON_AddNumberToObject(e, "share", total > 0 ? r[i].ms / total : 0);
        cJSON_AddNumberToObject(e, "bytes", (double)r[i].bytes);
        if (r[i].bytes) cJSON_AddNumberToObject(e, "gbps", gbps(&r[i]));
        cJSON_AddItemToArray(ops, e);
    }
    cJSON *layers = cJSON_AddArrayToObject(o, "layers");
    n = group(a, 1, r);
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "layer", r[i].layer);
        cJSON_AddNumberToObject(e, "calls", (double)r[i].calls);
        cJSON_AddNumberToObject(e, "total_ms", r[i].ms);
        cJSON_AddNumberToObject(e, "share", total > 0 ? r[i].ms / total : 0);
        cJSON_AddNumberToObject(e, "bytes", (double)r[i].bytes);
        if (r[i].bytes) cJSON_AddNumberToObject(e, "gbps", gbps(&r[i]));
        cJSON_AddItemToArray(layers, e);
    }
    free(r);
    return o;
}

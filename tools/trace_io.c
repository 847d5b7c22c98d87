#include "trace_io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int trace_set_add(trace_set *t, const dp_trace_event *ev) {
    uint64_t n = (uint64_t)ev->n_pos * (uint64_t)ev->dim;
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 256;
        trace_entry *ne = realloc(t->e, sizeof(trace_entry) * (size_t)cap);
        if (!ne) return -1;
        t->e = ne;
        t->cap = cap;
    }
    if (t->blob_len + n > t->blob_cap) {
        uint64_t cap = t->blob_cap ? t->blob_cap : 1 << 20;
        while (cap < t->blob_len + n) cap *= 2;
        float *nb = realloc(t->blob, cap * sizeof(float));
        if (!nb) return -1;
        t->blob = nb;
        t->blob_cap = cap;
    }
    trace_entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->point, sizeof e->point, "%s", dp_trace_point_name(ev->point));
    e->layer = ev->layer;
    e->pos0 = ev->pos0;
    e->n_pos = ev->n_pos;
    e->dim = ev->dim;
    e->offset = t->blob_len * sizeof(float);
    memcpy(t->blob + t->blob_len, ev->data, n * sizeof(float));
    t->blob_len += n;
    return 0;
}

int trace_set_write(trace_set *t, dp_outfile *of, const char *model, const char *backend, const int32_t *tokens,
                    int n_tokens) {
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "format", "doppler-trace");
    cJSON_AddNumberToObject(h, "version", 1);
    cJSON_AddStringToObject(h, "dtype", "<f4");
    cJSON_AddStringToObject(h, "model", model ? model : "");
    cJSON_AddStringToObject(h, "backend", backend ? backend : "");
    if (t->faults) cJSON_AddStringToObject(h, "faults", t->faults);
    if (t->has_sampler) {
        cJSON_AddNumberToObject(h, "temp", t->temp);
        cJSON_AddNumberToObject(h, "seed", (double)t->seed);
    }
    if (t->n_prompt > 0) cJSON_AddNumberToObject(h, "n_prompt", t->n_prompt);
    cJSON *tk = cJSON_AddArrayToObject(h, "tokens");
    for (int i = 0; i < n_tokens; i++) cJSON_AddItemToArray(tk, cJSON_CreateNumber(tokens[i]));
    if (t->meta_json) { /* the selected points, comma-separated */
        cJSON *pts = cJSON_AddArrayToObject(h, "points");
        for (const char *p = t->meta_json; *p;) {
            const char *e = strchr(p, ',');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), p);
            cJSON_AddItemToArray(pts, cJSON_CreateString(name));
            p += n + (e ? 1 : 0);
        }
    }
    cJSON *arr = cJSON_AddArrayToObject(h, "entries");
    for (int i = 0; i < t->n; i++) {
        const trace_entry *e = &t->e[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "point", e->point);
        cJSON_AddNumberToObject(o, "layer", e->layer);
        cJSON_AddNumberToObject(o, "pos0", e->pos0);
        cJSON_AddNumberToObject(o, "n_pos", e->n_pos);
        cJSON_AddNumberToObject(o, "dim", e->dim);
        cJSON_AddNumberToObject(o, "offset", (double)e->offset);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(e->n_pos));
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(e->dim));
        cJSON_AddItemToArray(arr, o);
    }
    /* data_offset depends on the header's own length: iterate to a fixpoint */
    uint64_t off = 0;
    char *txt = NULL;
    for (int it = 0; it < 4; it++) {
        cJSON *d = cJSON_GetObjectItem(h, "data_offset");
        if (d) cJSON_SetNumberValue(d, (double)off);
        else cJSON_AddNumberToObject(h, "data_offset", (double)off);
        free(txt);
        txt = cJSON_PrintUnformatted(h);
        if (!txt) break;
        uint64_t need = (strlen(txt) + 1 + 63) / 64 * 64;
        if (need == off) break;
        off = need;
    }
    cJSON_Delete(h);
    if (!txt) return DP_ERR_NOMEM;
    size_t tl = strlen(txt);
    char spaces[64];
    memset(spaces, ' ', sizeof spaces);
    /* write errors stick to of; dp_outfile_commit reports them with the reason */
    dp_outfile_write(of, txt, tl);
    for (uint64_t i = tl; i + 1 < off;) {
        size_t k = off - 1 - i < sizeof spaces ? (size_t)(off - 1 - i) : sizeof spaces;
        dp_outfile_write(of, spaces, k);
        i += k;
    }
    dp_outfile_write(of, "\n", 1);
    free(txt);
    /* the data in 16 MiB pieces, so progress can be shown and Ctrl-C honoured */
    const uint64_t piece = 4u << 20, total = t->blob_len * sizeof(float);
    for (uint64_t done = 0; done < t->blob_len;) {
        uint64_t n = t->blob_len - done < piece ? t->blob_len - done : piece;
        if (dp_outfile_write(of, t->blob + done, n * sizeof(float)) != DP_OK) break;
        done += n;
        if (t->progress && t->progress(t->progress_user, done * sizeof(float), total)) return TRACE_CANCELLED;
    }
    return DP_OK;
}

/* A JSON number that is an exact non-negative integer a double holds. */
static int as_u64(const cJSON *n, uint64_t *out) {
    if (!cJSON_IsNumber(n) || !(n->valuedouble >= 0 && n->valuedouble <= 9007199254740992.0) ||
        n->valuedouble != (double)(uint64_t)n->valuedouble)
        return 0;
    *out = (uint64_t)n->valuedouble;
    return 1;
}

int trace_set_read(trace_set *t, const char *path, char *err, int errlen) {
    memset(t, 0, sizeof *t);
    /* O_NONBLOCK: a FIFO would otherwise block open() until a writer came */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) return snprintf(err, (size_t)errlen, "cannot open %s: %s", path, strerror(errno)), -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return snprintf(err, (size_t)errlen, "%s: not a regular file", path), -1;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return snprintf(err, (size_t)errlen, "cannot open %s: %s", path, strerror(errno)), -1;
    }
    long len = (long)st.st_size;
    char *buf = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(buf);
        return snprintf(err, (size_t)errlen, "cannot read %s", path), -1;
    }
    fclose(f);
    buf[len] = 0;
    return trace_set_parse(t, buf, (size_t)len, path, err, errlen);
}

int trace_set_parse(trace_set *t, char *buf, size_t len, const char *path, char *err, int errlen) {
    memset(t, 0, sizeof *t);
    t->file_buf = buf;
    char *nl = memchr(buf, '\n', len);
    if (!nl) return snprintf(err, (size_t)errlen, "%s: not a doppler trace (no header line)", path), -1;
    *nl = 0;
    cJSON *h = cJSON_Parse(buf);
    cJSON *fmt = h ? cJSON_GetObjectItem(h, "format") : NULL;
    cJSON *doff = h ? cJSON_GetObjectItem(h, "data_offset") : NULL;
    cJSON *ents = h ? cJSON_GetObjectItem(h, "entries") : NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "doppler-trace") || !cJSON_IsNumber(doff) ||
        !cJSON_IsArray(ents)) {
        cJSON_Delete(h);
        return snprintf(err, (size_t)errlen, "%s: not a doppler trace (bad header)", path), -1;
    }
    uint64_t base;
    if (!as_u64(doff, &base) || base > (uint64_t)len) {
        cJSON_Delete(h);
        return snprintf(err, (size_t)errlen, "%s: not a doppler trace (bad data_offset)", path), -1;
    }
    cJSON *pts = cJSON_GetObjectItem(h, "points"), *pt;
    if (cJSON_IsArray(pts)) {
        size_t len_all = 1;
        cJSON_ArrayForEach(pt, pts) if (cJSON_IsString(pt)) len_all += strlen(pt->valuestring) + 1;
        t->meta_json = calloc(len_all, 1);
        cJSON_ArrayForEach(pt, pts) if (cJSON_IsString(pt)) {
            if (*t->meta_json) strcat(t->meta_json, ",");
            strcat(t->meta_json, pt->valuestring);
        }
    }
    cJSON *fl = cJSON_GetObjectItem(h, "faults");
    if (cJSON_IsString(fl)) t->faults = strdup(fl->valuestring);
    cJSON *tk = cJSON_GetObjectItem(h, "tokens"), *tv;
    if (cJSON_IsArray(tk)) {
        t->tokens = malloc(sizeof(int32_t) * (size_t)(cJSON_GetArraySize(tk) + 1));
        /* an id that is not an exact int32 reads as -1 (no token), never as a cast out of range */
        cJSON_ArrayForEach(tv, tk) {
            uint64_t id;
            t->tokens[t->n_tokens++] = as_u64(tv, &id) && id <= INT32_MAX ? (int32_t)id : -1;
        }
    }
    cJSON *np = cJSON_GetObjectItem(h, "n_prompt");
    t->n_prompt = cJSON_IsNumber(np) && np->valueint >= 0 && np->valueint < t->n_tokens ? np->valueint : t->n_tokens;
    int n = cJSON_GetArraySize(ents);
    t->e = calloc((size_t)(n ? n : 1), sizeof(trace_entry));
    t->cap = n;
    cJSON *o;
    cJSON_ArrayForEach(o, ents) {
        trace_entry *e = &t->e[t->n];
        cJSON *pt = cJSON_GetObjectItem(o, "point");
        snprintf(e->point, sizeof e->point, "%s", cJSON_IsString(pt) ? pt->valuestring : "?");
        e->layer = cJSON_GetObjectItem(o, "layer") ? cJSON_GetObjectItem(o, "layer")->valueint : -1;
        e->pos0 = cJSON_GetObjectItem(o, "pos0") ? cJSON_GetObjectItem(o, "pos0")->valueint : 0;
        e->n_pos = cJSON_GetObjectItem(o, "n_pos") ? cJSON_GetObjectItem(o, "n_pos")->valueint : 0;
        e->dim = cJSON_GetObjectItem(o, "dim") ? cJSON_GetObjectItem(o, "dim")->valueint : 0;
        cJSON *off = cJSON_GetObjectItem(o, "offset");
        e->offset = 0;
        /* each bound on its own: a sum of file-given sizes can wrap around */
        uint64_t room = (uint64_t)len - base, bytes = 0;
        if ((off && !as_u64(off, &e->offset)) || e->n_pos <= 0 || e->dim <= 0 || e->offset > room ||
            __builtin_mul_overflow((uint64_t)e->n_pos * (uint64_t)e->dim, 4, &bytes) || bytes > room - e->offset ||
            (base + e->offset) % 4) {
            cJSON_Delete(h);
            return snprintf(err, (size_t)errlen, "%s: entry %d (%s) lies outside the file", path, t->n, e->point), -1;
        }
        e->data = (float *)(buf + base + e->offset);
        t->n++;
    }
    cJSON_Delete(h);
    return 0;
}

void trace_set_free(trace_set *t) {
    free(t->e);
    free(t->blob);
    free(t->meta_json);
    free(t->file_buf);
    free(t->faults);
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

/* GGUF writer: key/value pairs and tensors collected in memory, written
 * through a dp_outfile (so a failed write leaves the destination as it was). */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "util.h"

typedef struct {
    char *name;
    int type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
    void *data;              /* owned copy, or NULL when filled at write time */
} wtensor;

struct gguf_writer {
    uint8_t *kv;             /* serialized key/value pairs */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    uint32_t alignment, version;
    int64_t n_tensors_override, n_kv_override;
    int oom;
};

gguf_writer *gguf_writer_new(uint32_t alignment) {
    gguf_writer *w = dp_calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    w->version = 3;
    w->n_tensors_override = w->n_kv_override = -1;
    if (w->alignment != GGUF_DEFAULT_ALIGNMENT) gguf_w_u32(w, "general.alignment", w->alignment);
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv);
    free(w);
}

void gguf_writer_set_header(gguf_writer *w, uint32_t version, int64_t n_tensors_override, int64_t n_kv_override) {
    w->version = version;
    w->n_tensors_override = n_tensors_override;
    w->n_kv_override = n_kv_override;
}

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->oom) return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) {
            w->oom = 1;
            return;
        }
        w->kv = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}

static void put_u32(gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(gguf_writer *w, const char *s, size_t n) {
    put_u64(w, n);
    put(w, s, n);
}
static void put_key(gguf_writer *w, const char *key, gguf_vtype t) {
    put_str(w, key, strlen(key));
    put_u32(w, t);
    w->n_kv++;
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { put_key(w, key, GGUF_UINT32); put(w, &v, 4); }
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { put_key(w, key, GGUF_INT32); put(w, &v, 4); }
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v) { put_key(w, key, GGUF_UINT64); put(w, &v, 8); }
void gguf_w_f32(gguf_writer *w, const char *key, float v) { put_key(w, key, GGUF_FLOAT32); put(w, &v, 4); }
void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    put_key(w, key, GGUF_BOOL);
    put(w, &b, 1);
}
void gguf_w_str(gguf_writer *w, const char *key, const char *v) {
    put_key(w, key, GGUF_STRING);
    put_str(w, v, strlen(v));
}
void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype t, const void *data, uint64_t n) {
    put_key(w, key, GGUF_ARRAY);
    put_u32(w, t);
    put_u64(w, n);
    put(w, data, n * gguf_vtype_size(t));
}
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, const size_t *lens, uint64_t n) {
    put_key(w, key, GGUF_ARRAY);
    put_u32(w, GGUF_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, v[i], lens ? lens[i] : strlen(v[i]));
}
void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    put_key(w, kv->key, kv->type);
    if (kv->type == GGUF_ARRAY) {
        put_u32(w, kv->arr_type);
        put_u64(w, kv->n);
    }
    put(w, kv->data, kv->size);
}

int gguf_w_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne, const void *data) {
    const dp_type_traits *tt = dp_type_get(type);
    if (!tt || n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return dp_set_error(DP_ERR_ARG, "gguf writer: bad type or dims for tensor '%s'", name);
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *nt = realloc(w->t, sizeof(wtensor) * (size_t)cap);
        if (!nt) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t nelem = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        t->ne[i] = i < n_dims ? ne[i] : 1;
        nelem *= (uint64_t)t->ne[i];
    }
    if (t->ne[0] % tt->block_size) {
        free(t->name);
        return dp_set_error(DP_ERR_ARG, "gguf writer: tensor '%s' row %lld not a multiple of block %d", name,
                            (long long)t->ne[0], tt->block_size);
    }
    t->nbytes = nelem / (uint64_t)tt->block_size * (uint64_t)tt->type_size;
    if (data) {
        t->data = malloc(t->nbytes ? t->nbytes : 1);
        if (!t->data) {
            free(t->name);
            return dp_set_error(DP_ERR_NOMEM, "out of memory");
        }
        memcpy(t->data, data, t->nbytes);
    }
    w->n_t++;
    return 0;
}

static int write_all(dp_outfile *fp, const void *p, size_t n) { return dp_outfile_write(fp, p, n) ? -1 : 0; }

static int write_pad(dp_outfile *fp, uint64_t pos, uint64_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - pos % align) % align;
    while (pad) {
        size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        if (write_all(fp, zeros, k)) return -1;
        pad -= k;
    }
    return 0;
}

int gguf_writer_write_to(gguf_writer *w, dp_outfile *fp, gguf_fill_fn fill, void *user) {
    if (w->oom) return dp_set_error(DP_ERR_NOMEM, "gguf writer: out of memory");
    int rc = 0;
    uint64_t pos = 0;
    uint64_t nt = w->n_tensors_override >= 0 ? (uint64_t)w->n_tensors_override : (uint64_t)w->n_t;
    uint64_t nk = w->n_kv_override >= 0 ? (uint64_t)w->n_kv_override : w->n_kv;
    rc |= write_all(fp, GGUF_MAGIC, 4);
    rc |= write_all(fp, &w->version, 4);
    rc |= write_all(fp, &nt, 8);
    rc |= write_all(fp, &nk, 8);
    rc |= write_all(fp, w->kv, w->kv_len);
    pos = 24 + w->kv_len;
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims, ty = (uint32_t)t->type;
        t->offset = off;
        rc |= write_all(fp, &nl, 8);
        rc |= write_all(fp, t->name, nl);
        rc |= write_all(fp, &nd, 4);
        for (int d = 0; d < t->n_dims; d++) rc |= write_all(fp, &t->ne[d], 8);
        rc |= write_all(fp, &ty, 4);
        rc |= write_all(fp, &t->offset, 8);
        pos += 8 + nl + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
        off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    rc |= write_pad(fp, pos, w->alignment);
    void *buf = NULL;
    uint64_t buf_cap = 0;
    for (int i = 0; i < w->n_t && !rc; i++) {
        wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (!fill) {
                free(buf);
                return dp_set_error(DP_ERR_ARG, "gguf writer: tensor '%s' has no data", t->name);
            }
            if (t->nbytes > buf_cap) {
                free(buf);
                buf = malloc(t->nbytes);
                buf_cap = buf ? t->nbytes : 0;
                if (!buf) return dp_set_error(DP_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", t->name);
            }
            fill(user, i, buf, t->nbytes);
            src = buf;
        }
        rc |= write_all(fp, src, t->nbytes);
        if (i + 1 < w->n_t) rc |= write_pad(fp, t->nbytes, w->alignment);
    }
    free(buf);
    /* a failed write is reported, with its reason, by dp_outfile_commit */
    return DP_OK;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user) {
    dp_outfile *of = dp_outfile_open(path);
    if (!of) return DP_ERR_IO;
    int rc = gguf_writer_write_to(w, of, fill, user);
    if (rc) {
        dp_outfile_abort(of);
        return rc;
    }
    return dp_outfile_commit(of);
}

/* GGUF reader: mmap, validate everything before use (the writer: gguf_write.c). */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "util.h"

#define GGUF_MAX_NESTING 8
#define GGUF_MAX_KEY_LEN 65535

static const char *g_vtype_names[GGUF_NTYPES] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

const char *gguf_vtype_name(int t) {
    return (t >= 0 && t < GGUF_NTYPES) ? g_vtype_names[t] : "?";
}

size_t gguf_vtype_size(int t) {
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ------------------------------------------------------------ name index */

/* Open-addressing hash from name to index, for keys and tensor names. */
typedef struct {
    uint32_t cap;
    int32_t *slots;          /* -1 = empty */
} name_index;

typedef struct {
    name_index kv, tensors;
} gguf_index;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

static int index_init(name_index *ix, int n) {
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u + 1u) cap <<= 1;
    ix->cap = cap;
    ix->slots = dp_malloc(sizeof(int32_t) * cap);
    if (!ix->slots) return -1;
    for (uint32_t i = 0; i < cap; i++) ix->slots[i] = -1;
    return 0;
}

/* Inserts idx under name; returns the index already there for duplicates. */
static int index_put(name_index *ix, const char *name, int idx, char *(*get)(const gguf_file *, int),
                     const gguf_file *f) {
    uint32_t m = ix->cap - 1, h = (uint32_t)hash_str(name) & m;
    while (ix->slots[h] >= 0) {
        if (strcmp(get(f, ix->slots[h]), name) == 0) return ix->slots[h];
        h = (h + 1) & m;
    }
    ix->slots[h] = idx;
    return -1;
}

static int index_get(const name_index *ix, const char *name, char *(*get)(const gguf_file *, int),
                     const gguf_file *f) {
    if (!ix->slots) return -1;
    uint32_t m = ix->cap - 1, h = (uint32_t)hash_str(name) & m;
    while (ix->slots[h] >= 0) {
        if (strcmp(get(f, ix->slots[h]), name) == 0) return ix->slots[h];
        h = (h + 1) & m;
    }
    return -1;
}

static char *kv_key(const gguf_file *f, int i) { return f->kv[i].key; }
static char *tensor_name(const gguf_file *f, int i) { return f->tensors[i].name; }

/* ---------------------------------------------------------------- parser */

typedef struct {
    const uint8_t *base;
    uint64_t size, pos;
    const char *label;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return dp_set_error(DP_ERR_FORMAT, "%s: truncated file: %s at offset %llu needs %llu bytes, %llu left",
                            c->label, what, (unsigned long long)c->pos, (unsigned long long)n,
                            (unsigned long long)(c->size - c->pos));
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > c->size - c->pos)
        return dp_set_error(DP_ERR_FORMAT, "%s: string length %llu of %s at offset %llu runs past the end of the file",
                            c->label, (unsigned long long)len, what, (unsigned long long)(c->pos - 8));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

/* Skips over one value of type t (validating nested arrays); returns its
 * byte span via the cursor. */
static int skip_value(cursor *c, uint32_t t, int depth, const char *key) {
    if (t >= GGUF_NTYPES)
        return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' has unknown value type %u", c->label, key, t);
    if (t == GGUF_STRING) {
        gguf_str s;
        return rd_str(c, &s, key);
    }
    if (t == GGUF_ARRAY) {
        if (depth >= GGUF_MAX_NESTING)
            return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' nests arrays deeper than %d", c->label, key,
                                GGUF_MAX_NESTING);
        uint32_t et;
        uint64_t n;
        if (rd_u32(c, &et, key) || rd_u64(c, &n, key)) return -1;
        if (et >= GGUF_NTYPES)
            return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' is an array of unknown type %u", c->label, key, et);
        size_t es = gguf_vtype_size(et);
        if (es) {
            uint64_t bytes;
            if (!dp_mul_u64(n, es, &bytes) || bytes > c->size - c->pos)
                return dp_set_error(DP_ERR_FORMAT, "%s: array '%s' of %llu elements runs past the end of the file",
                                    c->label, key, (unsigned long long)n);
            c->pos += bytes;
            return 0;
        }
        /* strings or arrays: each element takes at least 8 bytes */
        if (n > (c->size - c->pos) / 8)
            return dp_set_error(DP_ERR_FORMAT, "%s: array '%s' of %llu elements runs past the end of the file",
                                c->label, key, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (skip_value(c, et, depth + 1, key)) return -1;
        return 0;
    }
    size_t sz = gguf_vtype_size(t);
    if (need(c, sz, key)) return -1;
    c->pos += sz;
    return 0;
}

static int parse_kv(gguf_file *f, cursor *c, gguf_kv *kv) {
    gguf_str k;
    if (rd_str(c, &k, "metadata key")) return -1;
    if (k.len == 0 || k.len > GGUF_MAX_KEY_LEN)
        return dp_set_error(DP_ERR_FORMAT, "%s: metadata key of invalid length %llu at offset %llu", c->label,
                            (unsigned long long)k.len, (unsigned long long)(c->pos - k.len - 8));
    if (memchr(k.ptr, 0, k.len))
        return dp_set_error(DP_ERR_FORMAT, "%s: metadata key contains a NUL byte", c->label);
    kv->key = dp_strndup(k.ptr, k.len);
    if (!kv->key) return -1;
    uint32_t t;
    if (rd_u32(c, &t, kv->key)) return -1;
    if (t >= GGUF_NTYPES)
        return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' has unknown value type %u", c->label, kv->key, t);
    kv->type = (gguf_vtype)t;
    kv->n = 1;
    if (t == GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        uint64_t start = c->pos;
        if (rd_u32(c, &et, kv->key) || rd_u64(c, &n, kv->key)) return -1;
        if (et >= GGUF_NTYPES)
            return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' is an array of unknown type %u", c->label, kv->key, et);
        kv->arr_type = (gguf_vtype)et;
        kv->n = n;
        kv->data = c->base + c->pos;
        c->pos = start;
        if (skip_value(c, GGUF_ARRAY, 0, kv->key)) return -1;
        kv->size = c->pos - (uint64_t)(kv->data - c->base);
        if (et == GGUF_STRING) {
            /* n <= size/8 was checked by skip_value */
            kv->str_offs = dp_malloc(sizeof(uint64_t) * (n ? n : 1));
            if (!kv->str_offs) return -1;
            uint64_t off = 0;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t len;
                memcpy(&len, kv->data + off, 8);
                kv->str_offs[i] = off;
                off += 8 + len;
            }
        }
    } else {
        kv->data = c->base + c->pos;
        uint64_t start = c->pos;
        if (skip_value(c, t, 0, kv->key)) return -1;
        kv->size = c->pos - start;
    }
    (void)f;
    return 0;
}

static int parse_tensor(gguf_file *f, cursor *c, gguf_tensor *t) {
    gguf_str name;
    if (rd_str(c, &name, "tensor name")) return -1;
    if (name.len == 0 || name.len > 255 || memchr(name.ptr, 0, name.len))
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor name of invalid length %llu", c->label,
                            (unsigned long long)name.len);
    t->name = dp_strndup(name.ptr, name.len);
    if (!t->name) return -1;
    uint32_t nd, type;
    if (rd_u32(c, &nd, t->name)) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1..%d allowed)", c->label, t->name,
                            nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    uint64_t nelem = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t ne;
        if (rd_u64(c, &ne, t->name)) return -1;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' has invalid dimension %u = %llu", c->label,
                                t->name, i, (unsigned long long)ne);
        if (!dp_mul_u64(nelem, ne, &nelem) || nelem > (uint64_t)INT64_MAX)
            return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' element count overflows", c->label, t->name);
        t->ne[i] = (int64_t)ne;
    }
    if (rd_u32(c, &type, t->name)) return -1;
    const dp_type_traits *tt = dp_type_get((int)type);
    if (!tt)
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' has unknown type id %u", c->label, t->name, type);
    t->type = (int)type;
    if (t->ne[0] % tt->block_size)
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' row of %lld elements is not a multiple of %s's block size %d",
                            c->label, t->name, (long long)t->ne[0], tt->name, tt->block_size);
    uint64_t nbytes;
    if (!dp_mul_u64(nelem / (uint64_t)tt->block_size, (uint64_t)tt->type_size, &nbytes))
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' byte size overflows", c->label, t->name);
    t->nbytes = nbytes;
    if (rd_u64(c, &t->offset, t->name)) return -1;
    (void)f;
    return 0;
}

static _Thread_local const gguf_file *g_sort_file;
static int cmp_offset(const void *a, const void *b) {
    uint64_t x = g_sort_file->tensors[*(const int *)a].offset, y = g_sort_file->tensors[*(const int *)b].offset;
    return x < y ? -1 : x > y;
}

static gguf_file *parse(const uint8_t *map, uint64_t size, const char *label) {
    gguf_file *f = dp_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->path = strdup(label);
    f->map = map;
    f->size = size;
    cursor c = {map, size, 0, f->path};
    gguf_index *ix = dp_calloc(1, sizeof *ix);
    if (!ix) goto fail;
    f->index = ix;

    if (size < 4) {
        dp_set_error(DP_ERR_FORMAT, "%s: truncated file: %llu bytes is too short for a GGUF header", label,
                     (unsigned long long)size);
        goto fail;
    }
    if (memcmp(map, GGUF_MAGIC, 4) != 0) {
        dp_set_error(DP_ERR_FORMAT, "%s: not a GGUF file (bad magic %02x %02x %02x %02x)", label, map[0], map[1],
                     map[2], map[3]);
        goto fail;
    }
    c.pos = 4;
    uint64_t n_tensors, n_kv;
    if (rd_u32(&c, &f->version, "header version")) goto fail;
    if (f->version != 2 && f->version != 3) {
        dp_set_error(DP_ERR_FORMAT, "%s: unsupported GGUF version %u (2 and 3 are supported)", label, f->version);
        goto fail;
    }
    if (rd_u64(&c, &n_tensors, "header tensor count") || rd_u64(&c, &n_kv, "header metadata count")) goto fail;
    /* Every key/value needs at least 8+1+4 bytes, every tensor 8+1+4+8+4+8. */
    if (n_kv > (size - c.pos) / 13) {
        dp_set_error(DP_ERR_FORMAT, "%s: metadata count %llu is impossible for a file of %llu bytes", label,
                     (unsigned long long)n_kv, (unsigned long long)size);
        goto fail;
    }
    if (n_tensors > (size - c.pos) / 33) {
        dp_set_error(DP_ERR_FORMAT, "%s: tensor count %llu is impossible for a file of %llu bytes", label,
                     (unsigned long long)n_tensors, (unsigned long long)size);
        goto fail;
    }
    f->kv = dp_calloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
    f->tensors = dp_calloc(n_tensors ? n_tensors : 1, sizeof(gguf_tensor));
    if (!f->kv || !f->tensors) goto fail;
    if (index_init(&ix->kv, (int)n_kv) || index_init(&ix->tensors, (int)n_tensors)) goto fail;

    for (uint64_t i = 0; i < n_kv; i++) {
        f->n_kv = (int)i + 1;
        if (parse_kv(f, &c, &f->kv[i])) goto fail;
        if (index_put(&ix->kv, f->kv[i].key, (int)i, kv_key, f) >= 0) {
            dp_set_error(DP_ERR_FORMAT, "%s: duplicate metadata key '%s'", label, f->kv[i].key);
            goto fail;
        }
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        int64_t a;
        if (!gguf_get_int(f, "general.alignment", &a) || a <= 0 || (a & (a - 1)) || a > (1 << 20)) {
            dp_set_error(DP_ERR_FORMAT, "%s: general.alignment must be a power of two, got type %s", label,
                         gguf_vtype_name(al->type));
            goto fail;
        }
        f->alignment = (uint64_t)a;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        f->n_tensors = (int)i + 1;
        if (parse_tensor(f, &c, &f->tensors[i])) goto fail;
        if (index_put(&ix->tensors, f->tensors[i].name, (int)i, tensor_name, f) >= 0) {
            dp_set_error(DP_ERR_FORMAT, "%s: duplicate tensor name '%s'", label, f->tensors[i].name);
            goto fail;
        }
    }

    uint64_t data_off = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (n_tensors > 0 && data_off > size) {
        dp_set_error(DP_ERR_FORMAT, "%s: truncated file: tensor data would start at %llu beyond the end (%llu bytes)",
                     label, (unsigned long long)data_off, (unsigned long long)size);
        goto fail;
    }
    f->data_offset = data_off;
    for (int i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (t->offset % f->alignment) {
            dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' offset %llu is not aligned to %llu", label, t->name,
                         (unsigned long long)t->offset, (unsigned long long)f->alignment);
            goto fail;
        }
        if (!dp_add_u64(data_off, t->offset, &end) || !dp_add_u64(end, t->nbytes, &end) || end > size) {
            dp_set_error(DP_ERR_FORMAT,
                         "%s: tensor '%s' data (%llu bytes at offset %llu) lies beyond the end of the file (%llu bytes)",
                         label, t->name, (unsigned long long)t->nbytes, (unsigned long long)(data_off + t->offset),
                         (unsigned long long)size);
            goto fail;
        }
        t->data = map + data_off + t->offset;
    }
    /* Shape x type size must fit the tensor's byte span: no tensor may run
     * into the next one. */
    if (f->n_tensors > 1) {
        int *ord = dp_malloc(sizeof(int) * (size_t)f->n_tensors);
        if (!ord) goto fail;
        for (int i = 0; i < f->n_tensors; i++) ord[i] = i;
        g_sort_file = f;
        qsort(ord, (size_t)f->n_tensors, sizeof(int), cmp_offset);
        for (int i = 0; i + 1 < f->n_tensors; i++) {
            const gguf_tensor *a = &f->tensors[ord[i]], *b = &f->tensors[ord[i + 1]];
            if (a->offset + a->nbytes > b->offset) {
                dp_set_error(DP_ERR_FORMAT,
                             "%s: tensor '%s' (%llu bytes by shape and type) overlaps tensor '%s' at offset %llu",
                             label, a->name, (unsigned long long)a->nbytes, b->name,
                             (unsigned long long)(data_off + b->offset));
                free(ord);
                goto fail;
            }
        }
        free(ord);
    }
    return f;
fail:
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_open_memory(const void *buf, uint64_t size, const char *label) {
    return parse((const uint8_t *)buf, size, label ? label : "<memory>");
}

gguf_file *gguf_open(const char *path) {
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever;
     * it changes nothing for the regular file that is all we accept */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        dp_set_error(DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        dp_set_error(DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) dp_set_error(DP_ERR_IO, "%s: cannot open: %s", path, strerror(EISDIR));
        else dp_set_error(DP_ERR_IO, "%s: not a regular file (a device, FIFO or socket)", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        dp_set_error(DP_ERR_FORMAT, "%s: truncated file: empty", path);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        dp_set_error(DP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        return NULL;
    }
    gguf_file *f = parse(map, (uint64_t)st.st_size, path);
    if (!f) {
        munmap(map, (size_t)st.st_size);
        return NULL;
    }
    f->mapped = 1;
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].str_offs);
    }
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    gguf_index *ix = f->index;
    if (ix) {
        free(ix->kv.slots);
        free(ix->tensors.slots);
        free(ix);
    }
    if (f->mapped) munmap((void *)f->map, (size_t)f->size);
    free(f->path);
    free(f);
}

/* ---------------------------------------------------------------- access */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    gguf_index *ix = f->index;
    int i = index_get(&ix->kv, key, kv_key, f);
    return i >= 0 ? &f->kv[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    gguf_index *ix = f->index;
    int i = index_get(&ix->tensors, name, tensor_name, f);
    return i >= 0 ? &f->tensors[i] : NULL;
}

static int scalar_as_i64(gguf_vtype t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_UINT8: *out = *p; return 1;
    case GGUF_INT8: *out = (int8_t)*p; return 1;
    case GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 1; }
    case GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return 1; }
    case GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 1; }
    case GGUF_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return 1; }
    case GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); if (v > (uint64_t)INT64_MAX) return 0; *out = (int64_t)v; return 1; }
    case GGUF_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return 1; }
    case GGUF_BOOL: *out = *p != 0; return 1;
    default: return 0;
    }
}

static int scalar_as_f64(gguf_vtype t, const uint8_t *p, double *out) {
    if (t == GGUF_FLOAT32) { float v; memcpy(&v, p, 4); *out = v; return 1; }
    if (t == GGUF_FLOAT64) { double v; memcpy(&v, p, 8); *out = v; return 1; }
    int64_t i;
    if (scalar_as_i64(t, p, &i)) { *out = (double)i; return 1; }
    return 0;
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type == GGUF_BOOL) return 0;
    return scalar_as_i64(kv->type, kv->data, out);
}

int gguf_get_float(const gguf_file *f, const char *key, double *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    return scalar_as_f64(kv->type, kv->data, out);
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    int64_t v;
    if (!kv || !scalar_as_i64(kv->type, kv->data, &v)) return 0;
    *out = v != 0;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_STRING) return 0;
    uint64_t len;
    memcpy(&len, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    out->len = len;
    return 1;
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    gguf_str s = {"", 0};
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->n) return s;
    const uint8_t *p = kv->data + kv->str_offs[i];
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

double gguf_arr_num(const gguf_kv *kv, uint64_t i) {
    double v = 0;
    size_t es = gguf_vtype_size(kv->arr_type);
    if (kv->type != GGUF_ARRAY || !es || i >= kv->n) return 0;
    scalar_as_f64(kv->arr_type, kv->data + i * es, &v);
    return v;
}

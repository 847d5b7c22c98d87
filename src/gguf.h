/* GGUF container: a validating mmap reader and a small writer.
 *
 * Layout (all little-endian):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv x { string key, u32 value_type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to general.alignment (default 32), then tensor data; each
 *   tensor's offset is relative to the start of the data and aligned.
 *   string = u64 length + bytes (no terminator);
 *   array  = u32 element type + u64 count + elements (arrays may nest).
 */
#ifndef DP_GGUF_H
#define DP_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "doppler.h"

typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_NTYPES
} gguf_vtype;

const char *gguf_vtype_name(int t);

typedef struct {
    const char *ptr;         /* not NUL-terminated; points into the mapping */
    uint64_t len;
} gguf_str;

typedef struct {
    char *key;               /* NUL-terminated copy */
    gguf_vtype type;
    gguf_vtype arr_type;     /* element type when type == GGUF_ARRAY */
    uint64_t n;              /* element count for arrays, else 1 */
    const uint8_t *data;     /* value bytes (for arrays: first element) */
    uint64_t size;           /* bytes of the value (for arrays: elements) */
    uint64_t *str_offs;      /* arrays of strings: offset of each element from data */
} gguf_kv;

#define GGUF_MAX_DIMS 4
#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32  /* when general.alignment is absent */

typedef struct {
    char *name;              /* NUL-terminated copy */
    int type;                /* ggml type id (see quant.h) */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused = 1 */
    uint64_t offset;         /* relative to the data section */
    uint64_t nbytes;
    const void *data;        /* into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int n_kv;
    gguf_kv *kv;
    int n_tensors;
    gguf_tensor *tensors;
    int mapped;              /* map is an mmap owned by this struct */
    void *index;             /* private: name lookup tables */
} gguf_file;

/* Opens and validates. On failure returns NULL and sets dp_last_error to a
 * one-line message naming the problem. */
gguf_file *gguf_open(const char *path);
/* Parses an in-memory image (used by tests and fuzzing; buf must outlive the
 * result). */
gguf_file *gguf_open_memory(const void *buf, uint64_t size, const char *label);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: return 1 when the key exists with a compatible scalar type
 * (any integer type for get_int, float32/64 for get_float), else 0. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_float(const gguf_file *f, const char *key, double *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Element access for arrays. */
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);
double gguf_arr_num(const gguf_kv *kv, uint64_t i);   /* numeric element as double */

/* Prints the header, metadata (long arrays abbreviated) and tensor table
 * (src/inspect.c; dp_inspect_file is this on an opened path). */
void gguf_print(const gguf_file *f, FILE *o);

/* Size in bytes of one scalar of type t (0 for string/array). */
size_t gguf_vtype_size(int t);

/* ---------------------------------------------------------------- writer */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(uint32_t alignment);
void gguf_writer_free(gguf_writer *w);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
/* Array of scalars of type t (n elements of gguf_vtype_size(t) bytes). */
void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype t, const void *data, uint64_t n);
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, const size_t *lens, uint64_t n);
/* Copies a whole key/value (any type, nested arrays included) from a reader. */
void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Adds a tensor; data (nbytes) is copied unless it is NULL, in which case the
 * bytes are produced later by the fill callback at write time. */
typedef void (*gguf_fill_fn)(void *user, int index, void *dst, uint64_t nbytes);
int gguf_w_tensor(gguf_writer *w, const char *name, int type, int n_dims,
                  const int64_t *ne, const void *data);
/* Writes the file atomically (a dp_outfile); tensors added with data == NULL
 * get their bytes from fill. Returns 0 or a negative dp_status. */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user);
/* Writes the whole image into an open dp_outfile; a failed write is reported
 * by dp_outfile_commit, which the caller does (or dp_outfile_abort). */
int gguf_writer_write_to(gguf_writer *w, dp_outfile *of, gguf_fill_fn fill, void *user);
/* Raw escape hatch for building broken files in tests: writes the header
 * version and counts exactly as given. */
void gguf_writer_set_header(gguf_writer *w, uint32_t version, int64_t n_tensors_override,
                            int64_t n_kv_override);

#endif

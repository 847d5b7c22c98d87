/* Trace files (.trace): full float32 tensors of chosen trace points plus an
 * index, readable by numpy without doppler (see docs/trace-format.md):
 *
 *   line 1: a one-line JSON header ending in '\n':
 *     {"format":"doppler-trace","version":1,"data_offset":N,"model":...,
 *      "tokens":[...],"points":["embed",...],"entries":[{"point":"q_rope","layer":0,"pos0":0,
 *      "n_pos":7,"dim":1024,"offset":0,"shape":[7,1024]}, ...]}
 *   padding spaces up to data_offset (a multiple of 64), then the raw
 *   little-endian float32 data; entry e starts at data_offset + e.offset.
 * Entries are in the order they were produced (the forward order). */
#ifndef DP_TRACE_IO_H
#define DP_TRACE_IO_H

#include <stdint.h>

#include "doppler.h"

typedef struct {
    char point[32];
    int layer, pos0, n_pos, dim;
    uint64_t offset;         /* bytes from data_offset */
    float *data;             /* n_pos x dim (reader: into the loaded file) */
} trace_entry;

typedef struct {
    trace_entry *e;
    int n, cap;
    float *blob;             /* writer: owned copies; reader: whole data section */
    uint64_t blob_len, blob_cap; /* in floats */
    char *meta_json;         /* the selected points, comma-separated (NULL = unknown) */
    char *file_buf;
    /* header fields beyond the entries: written when set, read when present */
    char *faults;            /* DOPPLER_FAULT faults in effect ("" = none; reader: NULL = not recorded) */
    int has_sampler;         /* writer: record temp and seed */
    double temp;
    uint64_t seed;
    int32_t *tokens;         /* reader: the token ids (NULL = not recorded) */
    int n_tokens;
    int n_prompt;            /* how many of the tokens are the prompt (the rest generated); reader: all
                              * when not recorded */
    /* writer: called as the data goes out (bytes so far, total); a nonzero
     * return abandons the file */
    int (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
} trace_set;

/* Writer: record one event (copies the data). */
int trace_set_add(trace_set *t, const dp_trace_event *ev);
/* Writes the file into of with header fields model path, backend, tokens
 * (and faults, sampler); the caller commits of (dp_outfile_commit reports a
 * failed write) or aborts it. Returns DP_OK, DP_ERR_NOMEM, or TRACE_CANCELLED
 * when the progress callback abandoned it. */
#define TRACE_CANCELLED 1
int trace_set_write(trace_set *t, dp_outfile *of, const char *model, const char *backend, const int32_t *tokens,
                    int n_tokens);
/* Reader; returns 0 or -1 with a message in *err. */
int trace_set_read(trace_set *t, const char *path, char *err, int errlen);
/* The same on a file's bytes: buf holds len bytes plus a NUL and becomes
 * t's (trace_set_free frees it, also after a failure); path labels errors. */
int trace_set_parse(trace_set *t, char *buf, size_t len, const char *path, char *err, int errlen);
void trace_set_free(trace_set *t);

#endif

/* Every environment switch of the library in one table (settings.c): name,
 * default, allowed values and meaning. The table is the only place that
 * reads the environment; a session reads it once when it is made, and a
 * value out of range or an unknown DOPPLER_CUDA_* name fails the session
 * with a one-line error. docs/cuda.md and docs/debugging.md list them. */
#ifndef DP_SETTINGS_H
#define DP_SETTINGS_H

#include <stddef.h>

/* The words of DOPPLER_CUDA_MVW_LANES, in settings.c's order: auto, w, then
 * k_matvec_l with 4, 8, 16 or 32 lanes a row, one unit a step or two (X2). */
enum {
    DP_MVW_AUTO, DP_MVW_W, DP_MVW_4, DP_MVW_8, DP_MVW_16, DP_MVW_32,
    DP_MVW_4X2, DP_MVW_8X2, DP_MVW_16X2, DP_MVW_32X2
};

typedef struct {
    /* model loading */
    char fault[256];     /* DOPPLER_FAULT: fault names (arch.c dp_faults_apply checks them) */
    /* sessions */
    int no_cuda;         /* DOPPLER_NO_CUDA: 1 hides the GPU */
    /* CPU backend */
    int cpu_level;       /* DOPPLER_CPU: -1 auto, else a dp_isa */
    int cpu_act;         /* DOPPLER_CPU_ACT: -1 auto, 0 f32, 1 int16 */
    /* CUDA backend */
    int cuda_pdl;        /* DOPPLER_CUDA_PDL */
    int attn_slice_keys; /* DOPPLER_CUDA_ATTN_SLICE_KEYS */
    int attn_one_slice;  /* DOPPLER_CUDA_ATTN_ONE_SLICE */
    int gqa_mul;         /* DOPPLER_CUDA_ATTN_GQA_MUL */
    int gqa_min_keys;    /* DOPPLER_CUDA_ATTN_GQA_MINK */
    int gqa_spin;        /* DOPPLER_CUDA_ATTN_GQA_SPIN */
    int mvw_pairs;       /* DOPPLER_CUDA_MVW_PAIRS */
    int mvw_lanes;       /* DOPPLER_CUDA_MVW_LANES: index of its word (DP_MVW_*) */
    int f16_weights;     /* DOPPLER_CUDA_F16_WEIGHTS */
    int f16_rows;        /* DOPPLER_CUDA_F16_ROWS */
    int f16_rows_k;      /* DOPPLER_CUDA_F16_ROWS_K */
    int f16_lm_rows;     /* DOPPLER_CUDA_F16_LM_ROWS */
    int batch_fuse;      /* DOPPLER_CUDA_BATCH_FUSE */
    int gemm_buckets;    /* DOPPLER_CUDA_GEMM_BUCKETS */
    int attn_split_keys; /* DOPPLER_CUDA_ATTN_SPLIT_KEYS */
    int attn_rows_keys;  /* DOPPLER_CUDA_ATTN_ROWS_KEYS */
    int split_k;         /* DOPPLER_CUDA_SPLIT_K */
    int lab_skip;        /* DOPPLER_CUDA_SKIP (lab builds only): DP_LAB_* bits */
} dp_settings;

/* The decode launches DOPPLER_CUDA_SKIP can leave out (lab builds). */
enum { DP_LAB_QKV = 1, DP_LAB_ATTN = 2, DP_LAB_O = 4, DP_LAB_GU = 8, DP_LAB_DOWN = 16 };

/* Where a setting acts (bit masks). */
enum { DP_SET_MODEL = 1, DP_SET_SESSION = 2, DP_SET_CPU = 4, DP_SET_CUDA = 8, DP_SET_ALL = 15 };

/* Reads the settings of the given scopes from the environment into *out
 * (defaults where unset and for the other scopes). Returns DP_OK, or
 * DP_ERR_ARG with a one-line error naming the variable when a value is not
 * allowed or (with DP_SET_CUDA) a DOPPLER_CUDA_* name is unknown. */
int dp_settings_read(dp_settings *out, unsigned scopes);

/* "NAME=value NAME=value ..." for the settings of the given scopes, as the
 * [Kernel] log lists them. */
void dp_settings_describe(const dp_settings *s, unsigned scopes, char *buf, size_t cap);

/* The table itself, for documentation checks: entry i's name and meaning
 * (NULL past the end). */
const char *dp_setting_name(int i);
const char *dp_setting_meaning(int i);

#endif

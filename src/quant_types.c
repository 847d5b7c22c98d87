/* The table of ggml element types: names, block sizes, bytes per block. */
#include <ctype.h>

#include "quant.h"

static const dp_type_traits g_types[DP_TYPE_COUNT] = {
    [DP_TYPE_F32] = {"F32", 1, 4, 1},
    [DP_TYPE_F16] = {"F16", 1, 2, 1},
    [DP_TYPE_Q4_0] = {"Q4_0", 32, 18, 1},
    [DP_TYPE_Q4_1] = {"Q4_1", 32, 20, 1},
    [DP_TYPE_Q5_0] = {"Q5_0", 32, 22, 1},
    [DP_TYPE_Q5_1] = {"Q5_1", 32, 24, 1},
    [DP_TYPE_Q8_0] = {"Q8_0", 32, 34, 1},
    [DP_TYPE_Q8_1] = {"Q8_1", 32, 36, 0},
    [DP_TYPE_Q2_K] = {"Q2_K", QK_K, 84, 1},
    [DP_TYPE_Q3_K] = {"Q3_K", QK_K, 110, 1},
    [DP_TYPE_Q4_K] = {"Q4_K", QK_K, 144, 1},
    [DP_TYPE_Q5_K] = {"Q5_K", QK_K, 176, 1},
    [DP_TYPE_Q6_K] = {"Q6_K", QK_K, 210, 1},
    [DP_TYPE_Q8_K] = {"Q8_K", QK_K, 292, 0},
    [DP_TYPE_IQ2_XXS] = {"IQ2_XXS", QK_K, 66, 1},
    [DP_TYPE_IQ2_XS] = {"IQ2_XS", QK_K, 74, 1},
    [DP_TYPE_IQ3_XXS] = {"IQ3_XXS", QK_K, 98, 1},
    [DP_TYPE_IQ1_S] = {"IQ1_S", QK_K, 50, 0},
    [DP_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, 1},
    [DP_TYPE_IQ3_S] = {"IQ3_S", QK_K, 110, 1},
    [DP_TYPE_IQ2_S] = {"IQ2_S", QK_K, 82, 1},
    [DP_TYPE_IQ4_XS] = {"IQ4_XS", QK_K, 136, 1},
    [DP_TYPE_I8] = {"I8", 1, 1, 0},
    [DP_TYPE_I16] = {"I16", 1, 2, 0},
    [DP_TYPE_I32] = {"I32", 1, 4, 0},
    [DP_TYPE_I64] = {"I64", 1, 8, 0},
    [DP_TYPE_F64] = {"F64", 1, 8, 0},
    [DP_TYPE_IQ1_M] = {"IQ1_M", QK_K, 56, 0},
    [DP_TYPE_BF16] = {"BF16", 1, 2, 1},
    [DP_TYPE_TQ1_0] = {"TQ1_0", QK_K, 54, 0},
    [DP_TYPE_TQ2_0] = {"TQ2_0", QK_K, 66, 0},
    [DP_TYPE_MXFP4] = {"MXFP4", 32, 17, 0},
};

const dp_type_traits *dp_type_get(int type) {
    if (type < 0 || type >= DP_TYPE_COUNT || !g_types[type].name) return NULL;
    return &g_types[type];
}

const char *dp_type_name(int type) {
    const dp_type_traits *t = dp_type_get(type);
    return t ? t->name : "?";
}

int dp_type_from_name(const char *name) {
    for (int i = 0; i < DP_TYPE_COUNT; i++) {
        const char *a = g_types[i].name, *b = name;
        if (!a) continue;
        while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

uint64_t dp_row_size(int type, int64_t n) {
    const dp_type_traits *t = dp_type_get(type);
    if (!t || n < 0) return 0;
    return (uint64_t)(n / t->block_size) * (uint64_t)t->type_size;
}

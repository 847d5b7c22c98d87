#include "ops.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "util.h"

void cpu_matmul(const dp_weight *w, const float *x, int n, float *out, float *row) {
    const int64_t cols = w->cols, rows = w->rows;
    const uint8_t *base = w->data;
    if (n == 1) {
        for (int64_t r = 0; r < rows; r++) out[r] = dp_vec_dot_f32(w->type, base + r * w->row_bytes, x, cols);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        dp_dequantize_row(w->type, base + r * w->row_bytes, row, cols);
        for (int i = 0; i < n; i++) {
            const float *xi = x + (int64_t)i * cols;
            float s = 0;
            for (int64_t c = 0; c < cols; c++) s += row[c] * xi[c];
            out[(int64_t)i * rows + r] = s;
        }
    }
}

void cpu_load_vec(const dp_weight *w, float *dst) { dp_dequantize_row(w->type, w->data, dst, w->cols); }

void cpu_rmsnorm(float *out, const float *x, const float *w, float offset, int n, int d, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * d;
        float *oi = out + (int64_t)i * d;
        double ss = 0;
        for (int j = 0; j < d; j++) ss += (double)xi[j] * xi[j];
        float scale = 1.0f / sqrtf((float)(ss / d) + eps);
        for (int j = 0; j < d; j++) oi[j] = xi[j] * scale * (w[j] + offset);
    }
}

void cpu_rope(float *x, int n_rot, const float *inv_freq, float pos, dp_rope_style style) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float ang = pos * inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        int a = style == DP_ROPE_NEOX ? i : 2 * i;
        int b = style == DP_ROPE_NEOX ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void cpu_gated_act(float *out, const float *gate, const float *up, int n, dp_act act) {
    if (act == DP_ACT_GELU_TANH) {
        const float k = 0.7978845608028654f; /* sqrt(2/pi) */
        for (int i = 0; i < n; i++) {
            float g = gate[i];
            out[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * up[i];
        }
    } else {
        for (int i = 0; i < n; i++) {
            float g = gate[i];
            out[i] = g / (1.0f + expf(-g)) * up[i];
        }
    }
}

void cpu_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void cpu_add(float *x, const float *y, int n) {
    for (int i = 0; i < n; i++) x[i] += y[i];
}

void cpu_attention(float *out, const float *q, const float *kc, const float *vc, int n, int pos0, int NH, int NKV,
                   int HD, int window, float scale, int exclude_self, float *sc, float *probs) {
    const int Q = NH * HD, KV = NKV * HD, group = NH / NKV, n_kv = pos0 + n;
    for (int i = 0; i < n; i++) {
        int p = pos0 + i;
        /* causal: keys 0..p; sliding window: keys with p - j < window */
        int lo = window && p - window + 1 > 0 ? p - window + 1 : 0;
        int hi = exclude_self && p > 0 ? p - 1 : p;
        for (int h = 0; h < NH; h++) {
            const float *qh = q + (size_t)i * Q + h * HD;
            const int g = h / group;
            for (int j = lo; j <= hi; j++) {
                const float *kj = kc + (size_t)j * KV + g * HD;
                float d = 0;
                for (int c = 0; c < HD; c++) d += qh[c] * kj[c];
                sc[j - lo] = d * scale;
            }
            cpu_softmax(sc, hi - lo + 1);
            float *o = out + (size_t)i * Q + h * HD;
            memset(o, 0, (size_t)HD * sizeof(float));
            for (int j = lo; j <= hi; j++) {
                const float *vj = vc + (size_t)j * KV + g * HD;
                float w = sc[j - lo];
                for (int c = 0; c < HD; c++) o[c] += w * vj[c];
            }
            if (probs) {
                float *pr = probs + ((size_t)i * NH + h) * n_kv;
                for (int j = 0; j < n_kv; j++) pr[j] = j >= lo && j <= hi ? sc[j - lo] : 0.0f;
            }
        }
    }
}

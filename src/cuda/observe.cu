/* Looking inside a CUDA forward pass: trace points copied back to the host
 * (only those asked for) and per-op device times from events between the
 * ops (in decode: event nodes of a separately captured graph, so the times
 * are GPU times without launch gaps). */
#include <stdlib.h>

#include "state.cuh"

int cu_prof_mark(dp_session *s, int op, int layer, uint64_t bytes) {
    if (!s->prof) return DP_OK;
    CudaState *cs = cu_state(s);
    ProfPool *pp = cs->pool;
    if (pp->n == pp->cap) {
        int cap = pp->cap ? 2 * pp->cap : 512;
        cudaEvent_t *ev = (cudaEvent_t *)realloc(pp->ev, sizeof(cudaEvent_t) * (size_t)cap);
        if (!ev) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        pp->ev = ev;
        ProfMark *mk = (ProfMark *)realloc(pp->marks, sizeof(ProfMark) * (size_t)cap);
        if (!mk) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        pp->marks = mk;
        for (int i = pp->cap; i < cap; i++) CU_TRY(cudaEventCreate(&pp->ev[i]));
        pp->cap = cap;
    }
    pp->marks[pp->n] = {op, layer, bytes};
    /* inside a stream capture the event must be external to become an
     * event-record node of the graph; outside one the flag is refused */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    CU_TRY(cudaStreamIsCapturing(cs->st, &cap));
    CU_TRY(cudaEventRecordWithFlags(pp->ev[pp->n], cs->st,
                                    cap == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : 0));
    pp->n++;
    return DP_OK;
}

int cu_prof_collect(dp_session *s, ProfPool *pp) {
    if (!s->prof || pp->n < 2) return DP_OK;
    CU_TRY(cudaEventSynchronize(pp->ev[pp->n - 1]));
    for (int i = 1; i < pp->n; i++) {
        float ms = 0;
        CU_TRY(cudaEventElapsedTime(&ms, pp->ev[i - 1], pp->ev[i]));
        dp_prof_add(s, pp->marks[i].op, pp->marks[i].layer, ms, pp->marks[i].bytes);
    }
    return DP_OK;
}

void cu_prof_free(ProfPool *pp) {
    for (int i = 0; i < pp->cap; i++) cudaEventDestroy(pp->ev[i]);
    free(pp->ev);
    free(pp->marks);
}

/* The pinned host buffer of the trace copies, grown to at least need floats. */
static int trace_host(CudaState *cs, size_t need) {
    if (need <= cs->h_trace_n) return DP_OK;
    if (cs->h_trace) cudaFreeHost(cs->h_trace);
    cs->h_trace = NULL, cs->h_trace_n = 0;
    CU_TRY(cudaHostAlloc((void **)&cs->h_trace, need * sizeof(float), cudaHostAllocDefault));
    cs->h_trace_n = need;
    return DP_OK;
}

int cu_trace(dp_session *s, int point, int layer, const float *d, int pos0, int n, int dim) {
    if (!dp_trace_on(s, point, layer)) return DP_OK;
    CudaState *cs = cu_state(s);
    const size_t need = (size_t)n * (size_t)dim;
    TRY(trace_host(cs, need));
    CU_TRY(cudaMemcpyAsync(cs->h_trace, d, need * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    CU_TRY(cudaStreamSynchronize(cs->st));
    dp_trace_emit(s, point, layer, pos0, n, dim, cs->h_trace);
    return DP_OK;
}

int cu_trace_cols(dp_session *s, int point, int layer, const float *d, int ld, int off, int dim, const float *bias,
                  int pos0, int n) {
    if (!dp_trace_on(s, point, layer)) return DP_OK;
    CudaState *cs = cu_state(s);
    TRY(trace_host(cs, (size_t)(n + 1) * (size_t)dim)); /* the rows, then the bias */
    float *h = cs->h_trace, *hb = h + (size_t)n * dim;
    CU_TRY(cudaMemcpy2DAsync(h, (size_t)dim * sizeof(float), d + off, (size_t)ld * sizeof(float),
                             (size_t)dim * sizeof(float), (size_t)n, cudaMemcpyDeviceToHost, cs->st));
    if (bias) CU_TRY(cudaMemcpyAsync(hb, bias, (size_t)dim * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    CU_TRY(cudaStreamSynchronize(cs->st));
    if (bias) /* one f32 addition, as the kernels that read the joint rows add it */
        for (int t = 0; t < n; t++)
            for (int i = 0; i < dim; i++) h[(size_t)t * dim + i] += hb[i];
    dp_trace_emit(s, point, layer, pos0, n, dim, h);
    return DP_OK;
}

int cu_trace_scores(dp_session *s, const AttnLaunch *A, int layer, int pos0, int n) {
    if (!dp_trace_on(s, DP_TP_ATTN_SCORES, layer)) return DP_OK;
    CudaState *cs = cu_state(s);
    const int NH = s->m->hp.n_head, n_kv = pos0 + n;
    const size_t need = (size_t)n * NH * n_kv;
    if (need > cs->probs_n) {
        if (cs->d_probs) cudaFree(cs->d_probs);
        if (cs->h_probs) cudaFreeHost(cs->h_probs);
        cs->d_probs = NULL, cs->h_probs = NULL, cs->probs_n = 0;
        CU_TRY(cudaMalloc((void **)&cs->d_probs, need * sizeof(float)));
        CU_TRY(cudaHostAlloc((void **)&cs->h_probs, need * sizeof(float), cudaHostAllocDefault));
        cs->probs_n = need;
    }
    TRY(dp_cu_attention_probs(A, cs->d_probs, n_kv, cs->st));
    CU_TRY(cudaMemcpyAsync(cs->h_probs, cs->d_probs, need * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    CU_TRY(cudaStreamSynchronize(cs->st));
    dp_trace_emit(s, DP_TP_ATTN_SCORES, layer, pos0, n, NH * n_kv, cs->h_probs);
    return DP_OK;
}

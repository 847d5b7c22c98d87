/* Lab builds only (-DDOPPLER_CUDA_LAB=ON): DOPPLER_CUDA_SKIP=qkv,attn,o,gu,down
 * leaves those launches out of every decode graph (their nodes disabled in
 * the instantiated graph), so that `doppler bench` shows what each costs
 * where the launches overlap. The output is meaningless; a warning says so.
 * The product build has no such switch: the forward pass knows nothing of
 * it. */
#include <stdio.h>
#include <string.h>

#include "state.cuh"

namespace {

/* The nodes after node (out NULL: their count). The edges of a step captured
 * with programmatic dependent launch carry data, which must be asked for too. */
cudaError_t next_nodes(cudaGraphNode_t node, cudaGraphNode_t *out, size_t *n) {
    cudaGraphEdgeData edges[1];
    if (out && *n > 1) return cudaErrorInvalidValue;
#if CUDART_VERSION >= 13000
    return cudaGraphNodeGetDependentNodes(node, out, out ? edges : NULL, n);
#elif CUDART_VERSION >= 12030
    return cudaGraphNodeGetDependentNodes_v2(node, out, out ? edges : NULL, n);
#else
    (void)edges;
    return cudaGraphNodeGetDependentNodes(node, out, n);
#endif
}

/* Which launch a kernel node is: its position among the matvecs of a layer
 * (Q/K/V, o, gate/up, down) or an attention kernel; -1 for the others. */
int launch_of(cudaGraphNode_t node, int *n_matvec) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) return -1;
    cudaKernelNodeParams kp;
    if (cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess) return -1;
    const char *name = NULL;
    if (cudaFuncGetName(&name, kp.func) != cudaSuccess || !name) return -1;
    if (strstr(name, "k_attn") || strstr(name, "k_attention")) return DP_LAB_ATTN;
    if (!strstr(name, "k_matvec")) return -1;
    static const int order[4] = {DP_LAB_QKV, DP_LAB_O, DP_LAB_GU, DP_LAB_DOWN};
    return order[(*n_matvec)++ % 4];
}

} // namespace

int cu_lab_skip(dp_session *s, cudaGraph_t g, cudaGraphExec_t ge) {
    const int mask = s->set.lab_skip;
    if (!mask) return DP_OK;
    static int warned;
    if (!warned++)
        fprintf(stderr, "doppler: DOPPLER_CUDA_SKIP: decode launches left out, the output is meaningless\n");
    /* a captured step is a chain: follow it from its root, so that the
     * matvecs come in the layer's order; the LM head (the last) stays */
    size_t n = 1;
    cudaGraphNode_t node;
    if (cudaGraphGetRootNodes(g, &node, &n) != cudaSuccess || n != 1)
        return dp_set_error(DP_ERR_BACKEND, "DOPPLER_CUDA_SKIP: the decode graph is not a chain");
    const int n_mv = 4 * s->m->hp.n_layer;
    int n_matvec = 0;
    for (;;) {
        const int seen = n_matvec, what = launch_of(node, &n_matvec);
        if (what > 0 && (mask & what) && seen < n_mv) CU_TRY(cudaGraphNodeSetEnabled(ge, node, 0));
        size_t nd = 0;
        CU_TRY(next_nodes(node, NULL, &nd));
        if (nd == 0) break;
        if (nd != 1) return dp_set_error(DP_ERR_BACKEND, "DOPPLER_CUDA_SKIP: the decode graph is not a chain");
        CU_TRY(next_nodes(node, &node, &nd));
    }
    return DP_OK;
}

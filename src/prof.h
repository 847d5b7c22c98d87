/* Per-op profiling used by the forward passes. With profiling off (s->prof
 * == NULL) PROF_BEGIN/PROF_END are one branch each and never read the clock. */
#ifndef DP_PROF_H
#define DP_PROF_H

#include "session.h"

typedef enum {
    PROF_EMBED, PROF_RMSNORM, PROF_MATMUL_QKV, PROF_QK_NORM, PROF_ROPE, PROF_ATTENTION, PROF_MATMUL_O,
    PROF_MATMUL_GATE_UP, PROF_ACT, PROF_MATMUL_DOWN, PROF_ADD, PROF_LM_HEAD, PROF_SAMPLE, PROF_OTHER,
    PROF_NOPS
} dp_prof_op;

typedef struct dp_prof_cell {
    uint64_t calls, bytes;
    double ms;
} dp_prof_cell;

/* s->prof holds PROF_NOPS x (n_layer + 1) cells; column n_layer = no layer. */
void dp_prof_add(dp_session *s, int op, int layer, double ms, uint64_t bytes);
const char *dp_prof_op_name(int op);

#define PROF_BEGIN(s) double prof_t0_ = (s)->prof ? dp_time_s() : 0.0
#define PROF_END(s, op, layer, bytes)                                                     \
    do {                                                                                  \
        if ((s)->prof) {                                                                  \
            double prof_t1_ = dp_time_s();                                                \
            dp_prof_add((s), (op), (layer), (prof_t1_ - prof_t0_) * 1e3, (bytes));        \
            prof_t0_ = prof_t1_;                                                          \
        }                                                                                 \
    } while (0)

#endif

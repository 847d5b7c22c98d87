/* Trace points: the forward passes call dp_trace_on() before producing a
 * point and dp_trace_emit() with host data. With no callback installed
 * dp_trace_on is a single load and branch per point and layer. */
#ifndef DP_TRACE_H
#define DP_TRACE_H

#include "session.h"

static inline int dp_trace_on(const dp_session *s, int point, int layer) {
    return s->trace_fn && ((s->trace_points >> point) & 1) &&
           (layer < 0 || !s->trace_layers || s->trace_layers[layer]);
}

/* Hands host data to the callback; returns nonzero when it asked to stop
 * (the forward pass should then return DP_ERR_STOPPED). */
int dp_trace_emit(dp_session *s, int point, int layer, int pos0, int n_pos, int dim, const float *data);

#endif

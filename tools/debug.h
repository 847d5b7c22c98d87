/* The debugging options shared by run, bench and trace dump:
 *   --debug                  full-vector statistics of chosen points
 *   --debug-layers 0,12,25   which layers (default all)
 *   --debug-pos last|all|N,M which positions (default last)
 *   --debug-points a,b       which points (default embed_scaled,resid_attn,resid_ffn,final_norm)
 *   --track-token TEXT|ID    logit, probability and rank of a token at every step (repeatable)
 *   --top-k-print K          the K most likely tokens and logit min/max/mean at every step
 *   --check-finite           stop at the first NaN/Inf and name layer, point and position */
#ifndef DP_DEBUG_H
#define DP_DEBUG_H

#include <stddef.h>
#include <stdint.h>

#include "doppler.h"
#include "options.h"

#define DEBUG_MAX_TRACK 16

typedef struct {
    int debug, check_finite, top_k_print;
    uint64_t points;                 /* selected points (bit per dp_trace_point) */
    int points_set;
    char *layers_arg;                /* parsed once the model is known */
    uint8_t *layers;                 /* n_layer flags or NULL = all */
    int pos_all, *pos_list, n_pos_list;
    const char *track_arg[DEBUG_MAX_TRACK];
    int32_t track_id[DEBUG_MAX_TRACK];
    int n_track;
    /* set when --check-finite stopped the pass */
    int bad_point, bad_layer, bad_pos, bad_seq, bad_index;
    float bad_value;
    int n_lines;                     /* [Layer] lines printed */
    /* [FFN] summaries (--debug with the FFN tag shown): act statistics of
     * the selected rows wait here for the layer's down projection */
    int ffn, n_ff;
    char ffn_act[16];
    struct debug_vstats *ffn_rows;
    int ffn_n, ffn_cap, ffn_layer, ffn_down_seen;
} debug_opts;

/* The debug options of a parsed command line (--debug ... --check-finite). */
void debug_from_args(debug_opts *d, const cli_args *a);
/* Option table checks of --debug-points, --debug-layers, --debug-pos. */
int debug_check_points(const char *v, char *err, size_t errlen);
int debug_check_layers(const char *v, char *err, size_t errlen);
int debug_check_pos(const char *v, char *err, size_t errlen);
/* Resolves layer and token selections against the model; exits 2 on bad ones. */
void debug_resolve(debug_opts *d, const dp_model *m);
/* Installs the trace callback when --debug or --check-finite is on; with
 * --debug and the FFN tag shown it also traces act and down for [FFN]. */
void debug_attach(debug_opts *d, dp_session *s, const dp_model *m);
/* Per-step token report (--track-token, --top-k-print) for the logits that
 * choose the token of generation step `step`. */
void debug_step(debug_opts *d, const dp_model *m, const float *logits, int step);
/* After dp_eval returned DP_ERR_STOPPED: prints where and exits 1. */
void debug_report_stop(debug_opts *d) __attribute__((noreturn));
/* Whether any per-step report needs host logits. */
int debug_wants_logits(const debug_opts *d);
void debug_free(debug_opts *d);

#endif

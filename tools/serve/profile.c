/* doppler serve --profile (profile.h). Runs on the scheduler thread: the
 * only thread that evaluates, so the session's profile is that step's. */
#include "profile.h"

#include <stdlib.h>

#include "../profile_print.h"

#define MAX_ENTRIES 4096

struct serve_prof {
    dp_session *s;
    FILE *out;
    prof_acc *decode, *mixed;
    long decode_steps, mixed_steps;
    long decode_rows, mixed_prompt_rows, mixed_decode_rows;
    double decode_wall, mixed_wall;
    dp_profile_entry *e;
};

serve_prof *serve_prof_new(dp_session *s, FILE *out) {
    serve_prof *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->s = s;
    p->out = out;
    p->decode = prof_acc_new();
    p->mixed = prof_acc_new();
    p->e = malloc(sizeof(dp_profile_entry) * MAX_ENTRIES);
    if (!p->decode || !p->mixed || !p->e || dp_session_set_profile(s, 1) != DP_OK) {
        prof_acc_free(p->decode);
        prof_acc_free(p->mixed);
        free(p->e);
        free(p);
        return NULL;
    }
    dp_session_reset_profile(s);
    return p;
}

void serve_prof_step(serve_prof *p, int prompt_rows, int decode_rows, int prompt_seqs, double wall_s) {
    const int n = dp_session_get_profile(p->s, p->e, MAX_ENTRIES);
    double op_ms = 0;
    for (int i = 0; i < n; i++) op_ms += p->e[i].total_ms;
    prof_acc_add(prompt_rows ? p->mixed : p->decode, p->e, n);
    dp_session_reset_profile(p->s);
    if (prompt_rows) {
        p->mixed_steps++;
        p->mixed_prompt_rows += prompt_rows;
        p->mixed_decode_rows += decode_rows;
        p->mixed_wall += wall_s;
    } else {
        p->decode_steps++;
        p->decode_rows += decode_rows;
        p->decode_wall += wall_s;
    }
    fprintf(p->out, "[Serve] step %ld: %d decode rows, %d prompt rows (%d sequences): %.3f ms (ops %.3f ms)\n",
            p->decode_steps + p->mixed_steps, decode_rows, prompt_rows, prompt_seqs, wall_s * 1e3, op_ms);
}

void serve_prof_finish(serve_prof *p) {
    if (!p) return;
    char title[256];
    snprintf(title, sizeof title,
             "profile of %ld decode steps (%ld rows, %.1f ms of wall time), per row", p->decode_steps,
             p->decode_rows, p->decode_wall * 1e3);
    if (p->decode_steps) prof_print(p->out, title, p->decode, (int)p->decode_rows);
    snprintf(title, sizeof title,
             "profile of %ld steps with prompt rows (%ld prompt and %ld decode rows, %.1f ms of wall time), per row",
             p->mixed_steps, p->mixed_prompt_rows, p->mixed_decode_rows, p->mixed_wall * 1e3);
    if (p->mixed_steps) prof_print(p->out, title, p->mixed, (int)(p->mixed_prompt_rows + p->mixed_decode_rows));
    dp_session_set_profile(p->s, 0);
    prof_acc_free(p->decode);
    prof_acc_free(p->mixed);
    free(p->e);
    free(p);
}

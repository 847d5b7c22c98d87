/* Memory traffic of a decode step, for effective-bandwidth figures
 * (doppler bench): the weights a single-token forward pass reads plus the
 * K/V cache rows its attention reads. */
#include "model.h"
#include "session.h"

typedef struct {
    const dp_model *m;
    uint64_t bytes;
} visit_acc;

static void add_weight(void *user, const dp_weight *w) {
    visit_acc *a = user;
    /* the embedding is only gathered (one row) unless it is also the LM
     * head, which visit reports once as token_embd */
    if (w->data == a->m->tok_embd.data && a->m->output.data != a->m->tok_embd.data) a->bytes += w->row_bytes;
    else a->bytes += w->nbytes;
}

uint64_t dp_session_decode_bytes(const dp_session *s, int n_past) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    visit_acc a = {m, 0};
    dp_model_visit_weights(m, add_weight, &a);
    if (n_past < 0) n_past = 0;
    /* the session's cache element (float32 by default on the CPU, f16 on CUDA) */
    const uint64_t elem = (uint64_t)s->kv_eb;
    const uint64_t kv_row = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * elem;
    for (int l = 0; l < hp->n_layer; l++) {
        uint64_t keys = (uint64_t)n_past + 1;
        int w = hp->layers[l].window;
        if (w > 0 && keys > (uint64_t)w) keys = (uint64_t)w;
        a.bytes += 2 * keys * kv_row;
    }
    return a.bytes;
}

/* POST /v1/embeddings (OpenAI's): each input is a sequence of the
 * scheduler that computes its prompt, asks the engine for the last hidden
 * state of the positions its pooling reads (dp_batch_entry.hidden) and
 * samples nothing; the connection thread pools, normalises and answers. */
#ifndef SERVE_EMBED_H
#define SERVE_EMBED_H

#include "http.h"
#include "scheduler.h"

/* The route's handler (user: the server). */
void serve_embeddings(http_req *c, void *user);

/* For the scheduler thread: whether the embedding input r pools the
 * hidden state of its position pos, and the row (n_embd floats) of one
 * such position, added into r->emb. */
int embed_wants(const srv_req *r, int pos);
void embed_add(srv_req *r, const float *row, int n_embd);

#endif

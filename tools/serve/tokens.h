/* llama-server's token endpoints: POST /tokenize (text -> ids, or ids
 * with their pieces) and POST /detokenize (ids -> text), on the model's
 * tokenizer alone (no scheduler, no sequence). */
#ifndef SERVE_TOKENS_H
#define SERVE_TOKENS_H

#include "http.h"

/* user: the server (serve.h). */
void serve_tokenize(http_req *c, void *user);
void serve_detokenize(http_req *c, void *user);

#endif

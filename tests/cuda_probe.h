/* The probe of the GPU tests (test_cuda, test_cuda_batch): a tiny synthetic
 * model (qwen2, f32; its file removed again once loaded) and a CUDA session
 * of 16 positions on it. Returns the session (the caller frees it and
 * *model), or NULL with the reason in why (no CUDA build, no GPU; *model may
 * then be NULL too). A header of its own: testlib would pull the CUDA
 * backend into every test. */
#ifndef DP_CUDA_PROBE_H
#define DP_CUDA_PROBE_H

#include <stdio.h>

#include "doppler.h"
#include "testlib.h"

static inline dp_session *t_cuda_probe(uint64_t seed, dp_model **model, char *why, size_t cap) {
    const char *path = t_tmp_path(".gguf");
    dp_synth_params sp = {.arch = "qwen2", .preset = "tiny", .type = "f32", .seed = seed};
    CHECKF(dp_synth(&sp, path) == DP_OK, "synth: %s", dp_last_error());
    *model = dp_model_load(path);
    remove(path);
    dp_session_params ps;
    dp_session_params_default(&ps);
    ps.backend = DP_BACKEND_CUDA;
    ps.n_ctx = 16;
    dp_session *s = *model ? dp_session_new(*model, &ps) : NULL;
    if (!s) snprintf(why, cap, "%s", dp_last_error());
    return s;
}

#endif

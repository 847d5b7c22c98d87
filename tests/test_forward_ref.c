/* doppler's CPU forward pass against HuggingFace transformers (float32, the
 * same dequantized GGUF weights) on the real models Gemma 3 270M and
 * SmolLM2-135M: last-position logits, hidden states, 32-token greedy decode.
 * Fixtures: tests/fixtures/models/, made by tools/reference/hf_reference.py.
 * A model whose file is not in ~/.cache/doppler/models is skipped.
 * DOPPLER_REF_ONLY=<name> limits the run to one fixture. */
#include "forward_ref.h"

int main(void) {
    static const char *models[] = {"gemma-3-270m", "smollm2-135m"};
    const char *only = getenv("DOPPLER_REF_ONLY");
    int ran = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!only || !*only || strcmp(only, models[i]) == 0) ran += fr_check_model(models[i], 0);
    if (!ran) t_skip("no real model found in ~/.cache/doppler/models (or $DOPPLER_MODELS)");
    return t_done("test_forward_ref");
}

/* doppler's CPU forward pass against HuggingFace transformers on tiny
 * random-weight models (tests/fixtures/models/<name>.gguf, made with transformers
 * and written the way llama.cpp's converter writes them, by
 * tools/reference/make_tiny_models.py): Gemma 3 with sliding/global layers,
 * both RoPE θ, linear scaling on global layers and the 62-layer attention
 * scale; Qwen2 with biases in Q8_0; Llama with the Q/K permutation, untied
 * output, optional Q/K/V biases and Llama 3.1 rope_freqs. Same checks as
 * test_forward_ref, plus the longest prompt prefilled in chunks of 7 tokens.
 * DOPPLER_REF_ONLY=<name> limits the run to one fixture. */
#include "forward_ref.h"

int main(void) {
    static const char *models[] = {"gemma3-tiny", "gemma3-tiny-linear", "gemma3-tiny-62l",
                                   "qwen2-tiny",  "llama-tiny",         "llama-tiny-rope-freqs"};
    const char *only = getenv("DOPPLER_REF_ONLY");
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!only || !*only || strcmp(only, models[i]) == 0) fr_check_model(models[i], 7);
    return t_done("test_forward_tiny");
}

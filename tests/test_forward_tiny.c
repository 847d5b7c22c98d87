/* doppler's CPU forward pass against HuggingFace transformers on tiny
 * random-weight models (tests/fixtures/models/<name>.gguf, made with transformers
 * and written the way llama.cpp's converter writes them, by
 * tools/reference/make_tiny_models.py): Gemma 3 with sliding/global layers,
 * both RoPE θ, linear scaling on global layers and the 62-layer attention
 * scale; Qwen2 with biases in Q8_0; Llama with the Q/K permutation, untied
 * output, optional Q/K/V biases and Llama 3.1 rope_freqs; Qwen3 (q/k norms,
 * head_dim of its own); Gemma 2 (soft-capping, alternating windows); Phi-3
 * (fused tensors, partial rotary, LongRoPE); SmolLM3 (NoPE layers); Mistral
 * written as llama (window on every layer). Same checks as test_forward_ref,
 * plus the longest prompt prefilled in chunks of 7 tokens (Phi-3: 30, so that
 * every call is past its original context of 24 and takes LongRoPE's long
 * factors, as the one-call reference does).
 * DOPPLER_REF_ONLY=<name> limits the run to one fixture. */
#include "forward_ref.h"

int main(void) {
    static const struct {
        const char *name;
        int chunk;
    } models[] = {{"gemma3-tiny", 7},  {"gemma3-tiny-linear", 7}, {"gemma3-tiny-62l", 7}, {"qwen2-tiny", 7},
                  {"llama-tiny", 7},   {"llama-tiny-rope-freqs", 7}, {"qwen3-tiny", 7},    {"gemma2-tiny", 7},
                  {"phi3-tiny", 30},   {"smollm3-tiny", 7},       {"mistral-tiny", 7}};
    const char *only = getenv("DOPPLER_REF_ONLY");
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!only || !*only || strcmp(only, models[i].name) == 0) fr_check_model(models[i].name, models[i].chunk);
    return t_done("test_forward_tiny");
}

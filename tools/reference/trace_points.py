"""doppler's trace points and, per architecture, the transformers module that produces each (hf_trace.py).

The GGUF name of an architecture keys each table; `mistral` is transformers' name for a Mistral model that
the converter writes as `llama` (make_tiny_models.py builds it with MistralConfig).
"""

# doppler's trace points in forward order (dp_trace_point in include/doppler.h).
POINTS = ["embed", "embed_scaled", "attn_norm", "q", "k", "v", "q_normed", "k_normed", "q_rope", "k_rope",
          "attn_scores", "attn_out", "o_proj", "post_attn_norm", "resid_attn", "ffn_norm", "gate", "up", "act",
          "down", "post_ffn_norm", "resid_ffn", "final_norm", "logits"]
GLOBAL_POINTS = {"embed", "embed_scaled", "final_norm", "logits"}  # layer -1; all others are per layer
DEFAULT_OFF = {"attn_scores"}  # opt-in, as in `doppler trace dump`

# ------------------------------------------------------------------------------------ the mapping
#
# point -> (module path, what to take). {L} is the layer index. What to take:
#   "out"     the module's output (first element when it returns a tuple)
#   "in"      the module's first positional input (forward pre-hook)
#   "rows"    rows of the module's weight at the token ids (the embedding as stored, before any scale)
#   "rope_q", "rope_k"  the q/k returned by the modeling module's apply_rotary_pos_emb while this attention
#             module runs (the function is wrapped for the duration of the forward)
#   "attn_weights"      the attention module's second output: eager attention's softmax weights [h, q, kv]
#   "last"    the module's output at the last position only
#   "out_bshd"  the output of a per-head module applied before the head transpose: [1, s, h, d]
#   "part0".."part2"  a slice of a fused projection's output: Phi-3's qkv_proj (Q, K, V columns) and
#             gate_up_proj (gate, up halves)
#
# What each point is, in HF's terms:
#   embed          embed_tokens.weight[ids] (Gemma: before the sqrt(n_embd) scale)
#   embed_scaled   embed_tokens output (Gemma3TextScaledWordEmbedding multiplies by its embed_scale)
#   attn_norm      input_layernorm output
#   q, k, v        q_proj/k_proj/v_proj outputs (bias included)
#   q/k_normed     q_norm/k_norm outputs (gemma3 only; Gemma3RMSNorm multiplies by 1 + w)
#   q/k_rope       apply_rotary_pos_emb outputs; on SmolLM3's NoPE layers, where doppler's q_rope is q
#                  unrotated, the q_proj/k_proj outputs
#   attn_scores    eager softmax weights, rows [n_head][n_kv] (opt-in)
#   attn_out       o_proj input
#   o_proj         o_proj output
#   post_attn_norm gemma3: post_attention_layernorm output (the sandwich norm on the attention branch)
#   resid_attn     the residual after attention = the input of the pre-FFN norm. NOTE: in llama/qwen2 that norm
#                  is called post_attention_layernorm (it is the PRE-FFN norm); in gemma3 pre_feedforward_layernorm
#   ffn_norm       that pre-FFN norm's output
#   gate, up       gate_proj/up_proj outputs
#   act            down_proj input (act_fn(gate) * up)
#   down           down_proj output
#   post_ffn_norm  gemma3: post_feedforward_layernorm output
#   resid_ffn      decoder layer output
#   final_norm     model.norm output
#   logits         lm_head output at the last position (before Gemma 2's final soft-capping, like doppler's)

_L = "model.layers.{L}."
_COMMON = {
    "embed": ("model.embed_tokens", "rows"),
    "embed_scaled": ("model.embed_tokens", "out"),
    "attn_norm": (_L + "input_layernorm", "out"),
    "q": (_L + "self_attn.q_proj", "out"),
    "k": (_L + "self_attn.k_proj", "out"),
    "v": (_L + "self_attn.v_proj", "out"),
    "q_rope": (_L + "self_attn", "rope_q"),
    "k_rope": (_L + "self_attn", "rope_k"),
    "attn_scores": (_L + "self_attn", "attn_weights"),
    "attn_out": (_L + "self_attn.o_proj", "in"),
    "o_proj": (_L + "self_attn.o_proj", "out"),
    "gate": (_L + "mlp.gate_proj", "out"),
    "up": (_L + "mlp.up_proj", "out"),
    "act": (_L + "mlp.down_proj", "in"),
    "down": (_L + "mlp.down_proj", "out"),
    "resid_ffn": (_L.rstrip("."), "out"),
    "final_norm": ("model.norm", "out"),
    "logits": ("lm_head", "last"),
}

_LLAMA_FFN = {
    "resid_attn": (_L + "post_attention_layernorm", "in"),   # llama's pre-FFN norm
    "ffn_norm": (_L + "post_attention_layernorm", "out"),
}
_GEMMA_NORMS = {
    "post_attn_norm": (_L + "post_attention_layernorm", "out"),
    "resid_attn": (_L + "pre_feedforward_layernorm", "in"),
    "ffn_norm": (_L + "pre_feedforward_layernorm", "out"),
    "post_ffn_norm": (_L + "post_feedforward_layernorm", "out"),
}

POINT_MAP = {
    "gemma3": dict(_COMMON, **_GEMMA_NORMS, **{
        "q_normed": (_L + "self_attn.q_norm", "out"),
        "k_normed": (_L + "self_attn.k_norm", "out"),
    }),
    "llama": dict(_COMMON, **_LLAMA_FFN),
    "qwen2": dict(_COMMON, **_LLAMA_FFN),
    "qwen3": dict(_COMMON, **_LLAMA_FFN, **{
        "q_normed": (_L + "self_attn.q_norm", "out_bshd"),
        "k_normed": (_L + "self_attn.k_norm", "out_bshd"),
    }),
    "gemma2": dict(_COMMON, **_GEMMA_NORMS),
    "phi3": dict(_COMMON, **_LLAMA_FFN, **{
        "q": (_L + "self_attn.qkv_proj", "part0"),
        "k": (_L + "self_attn.qkv_proj", "part1"),
        "v": (_L + "self_attn.qkv_proj", "part2"),
        "gate": (_L + "mlp.gate_up_proj", "part0"),
        "up": (_L + "mlp.gate_up_proj", "part1"),
    }),
    "smollm3": dict(_COMMON, **_LLAMA_FFN),
    "mistral": dict(_COMMON, **_LLAMA_FFN),
}

# The modeling module whose apply_rotary_pos_emb is wrapped to see q_rope/k_rope.
ROPE_MODULE = {
    "gemma3": "transformers.models.gemma3.modeling_gemma3",
    "llama": "transformers.models.llama.modeling_llama",
    "qwen2": "transformers.models.qwen2.modeling_qwen2",
    "qwen3": "transformers.models.qwen3.modeling_qwen3",
    "gemma2": "transformers.models.gemma2.modeling_gemma2",
    "phi3": "transformers.models.phi3.modeling_phi3",
    "smollm3": "transformers.models.smollm3.modeling_smollm3",
    "mistral": "transformers.models.mistral.modeling_mistral",
}

# Points whose vectors are per-head Q or K rows: permuted to GGUF order for llama (see the module docstring).
_PERMUTED = {"q": "q", "q_rope": "q", "q_normed": "q", "k": "k", "k_rope": "k", "k_normed": "k"}
PERMUTE_QK = {"llama": _PERMUTED, "smollm3": _PERMUTED, "mistral": _PERMUTED}

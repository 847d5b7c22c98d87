#!/usr/bin/env python3
"""Tiny random-weight models for doppler's forward-pass tests, and their HF reference fixtures.

For each variant below: build the model with transformers (fixed seed, weights re-drawn with a std large
enough that attention and logits are far from flat), write it to GGUF with the `gguf` package the way
llama.cpp's converter would (tensor names, llama Q/K row permutation, Gemma's +1 on RMSNorm weights, tied
embeddings, sliding-window and RoPE metadata, rope_freqs for Llama-3.1 scaling, a small synthetic
tokenizer), read the GGUF back (dequantized with `gguf`, permutation and +1 undone) into the transformers
model, and write the fixture with hf_reference.write_fixture using random token ids as prompts.

Usage:  python tools/reference/make_tiny_models.py [--out tests/fixtures/models] [name ...]
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

import gguf
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402

SEED = 20261122

# name -> recipe. Every branch of src/arch.c's recipes is reached by one of these or by a real model:
# gemma3 (qk norm, sandwich norms, embedding scale, GELU-tanh, NeoX, sliding/global layers with two
# θ, linear scaling on global layers only, the 62-layer 1/sqrt(n_embd/n_head) attention scale),
# qwen2 (required Q/K/V biases, NeoX, tied embeddings, Q8_0 weights),
# llama (adjacent-pair RoPE through the converter permutation, untied output, optional Q/K/V biases
# absent and present, rope_freqs from Llama 3.1 rope scaling),
# qwen3 (plain q/k norms, head_dim != n_embd/n_head, untied), gemma2 (soft-capped scores and logits,
# alternating sliding layers with one θ), phi3 (fused QKV and gate/up, partial rotary, LongRoPE factors
# and attention factor, the window on every layer), smollm3 (a NoPE layer every fourth), mistral (written
# as llama, with its window on every layer).
VARIANTS = {
    "gemma3-tiny": dict(arch="gemma3", vocab=384, embd=64, ff=128, layers=7, heads=4, kv=2, hd=16, window=6,
                        dtype="f16", prompt_lens=[5, 17, 40]),
    "gemma3-tiny-linear": dict(arch="gemma3", vocab=384, embd=64, ff=128, layers=7, heads=4, kv=1, hd=16, window=5,
                               dtype="f16", linear=8.0, prompt_lens=[9, 33]),
    "gemma3-tiny-62l": dict(arch="gemma3", vocab=288, embd=32, ff=32, layers=62, heads=2, kv=1, hd=8, window=4,
                            dtype="f16", prompt_lens=[6, 20]),
    "qwen2-tiny": dict(arch="qwen2", vocab=320, embd=64, ff=128, layers=3, heads=4, kv=2, hd=16,
                       dtype="q8_0", prompt_lens=[5, 17, 40]),
    "llama-tiny": dict(arch="llama", vocab=320, embd=64, ff=128, layers=4, heads=4, kv=2, hd=16,
                       dtype="f16", prompt_lens=[5, 17, 40]),
    "llama-tiny-rope-freqs": dict(arch="llama", vocab=320, embd=64, ff=128, layers=3, heads=4, kv=1, hd=16,
                                  dtype="f32", qkv_bias=True, llama3=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                           original_max_position_embeddings=64),
                                  prompt_lens=[9, 40]),
    "qwen3-tiny": dict(arch="qwen3", vocab=320, embd=64, ff=128, layers=3, heads=4, kv=2, hd=24,
                       dtype="q8_0", prompt_lens=[5, 17, 40]),
    # caps small enough that the random model's scores and logits reach them
    "gemma2-tiny": dict(arch="gemma2", vocab=384, embd=64, ff=128, layers=5, heads=4, kv=2, hd=16, window=6,
                        attn_cap=4.0, final_cap=8.0, dtype="f16", prompt_lens=[5, 17, 40]),
    # original context 24, so the 9-token prompt's continuation switches to the long factors midway
    # (as HF does, per forward call) and the 40-token one uses them from the start
    "phi3-tiny": dict(arch="phi3", vocab=320, embd=64, ff=96, layers=3, heads=4, kv=2, hd=16, window=16,
                      rot=0.5, ctx=96, orig_ctx=24, dtype="q8_0", prompt_lens=[9, 40]),
    "smollm3-tiny": dict(arch="smollm3", vocab=320, embd=64, ff=128, layers=5, heads=4, kv=2, hd=16,
                         dtype="f16", prompt_lens=[5, 17, 40]),
    "mistral-tiny": dict(arch="mistral", vocab=320, embd=64, ff=128, layers=3, heads=4, kv=2, hd=24, window=7,
                         dtype="f16", prompt_lens=[6, 40]),
}

# GGUF architecture each variant's file is written as
GGUF_ARCH = {"mistral": "llama"}
BPE_ARCHS = ("qwen2", "qwen3", "smollm3")  # byte-level BPE vocabularies without BOS
# where transformers' gguf_file= loader cannot check the file
NO_HF_GGUF = {"smollm3": "transformers' GGUF loader has no smollm3 architecture"}

WORDS = ("the of and to in is was for on that with as by at from it his an are were which be this "
         "sky blue color light sun cloud rain water tree river stone house road city king book time year "
         "day night world life hand head word line name part place case point group number fact").split()

# ------------------------------------------------------------------------------------ tokenizers

def spm_vocab(n_vocab, specials):
    """SentencePiece-style vocabulary: control tokens, 256 byte tokens, then '▁word' pieces and letters."""
    toks = list(specials)
    types = [gguf.TokenType.CONTROL] * len(specials)
    scores = [0.0] * len(specials)
    unk = specials.index("<unk>")
    types[unk] = gguf.TokenType.UNKNOWN
    for b in range(256):
        toks.append("<0x%02X>" % b); types.append(gguf.TokenType.BYTE); scores.append(0.0)
    pieces = ["\u2581"] + ["\u2581" + w for w in WORDS] + list("abcdefghijklmnopqrstuvwxyz")
    i = 0
    while len(toks) < n_vocab:
        p = pieces[i] if i < len(pieces) else "\u2581w%d" % i
        toks.append(p); types.append(gguf.TokenType.NORMAL); scores.append(-float(i + 1)); i += 1
    return toks, scores, types


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def bpe_vocab(n_vocab, specials):
    """Byte-level BPE vocabulary: 256 byte characters, merged words (every merge's parts and result are
    tokens), then the special tokens at the end."""
    toks = bytes_to_unicode()
    have = set(toks)
    merges = []
    for w in ["\u0120" + w for w in WORDS] + WORDS:
        cur = w[0]
        for ch in w[1:]:
            if len(toks) >= n_vocab - len(specials):
                break
            nxt = cur + ch
            if nxt not in have:
                merges.append(cur + " " + ch); toks.append(nxt); have.add(nxt)
            cur = nxt
    while len(toks) < n_vocab - len(specials):
        toks.append("x%d" % len(toks))
    types = [gguf.TokenType.NORMAL] * len(toks) + [gguf.TokenType.CONTROL] * len(specials)
    return toks + list(specials), types, merges

# ---------------------------------------------------------------------------------------- models

def longrope_factors(v):
    """Random LongRoPE divisors (short ones near 1, long ones larger), one per rotated pair."""
    n = int(v["hd"] * v["rot"]) // 2
    rng = np.random.default_rng(SEED + 7)
    return [float(x) for x in rng.uniform(1.0, 1.5, n)], [float(x) for x in rng.uniform(1.0, 6.0, n)]


def hf_config(v):
    common = dict(vocab_size=v["vocab"], hidden_size=v["embd"], intermediate_size=v["ff"],
                  num_hidden_layers=v["layers"], num_attention_heads=v["heads"], num_key_value_heads=v["kv"],
                  head_dim=v["hd"], max_position_embeddings=v.get("ctx", 256))
    if v["arch"] == "qwen3":
        return transformers.Qwen3Config(**common, rms_norm_eps=1e-6,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                                        tie_word_embeddings=False, bos_token_id=v["vocab"] - 3,
                                        eos_token_id=v["vocab"] - 1, pad_token_id=v["vocab"] - 3)
    if v["arch"] == "gemma2":
        return transformers.Gemma2Config(
            **common, rms_norm_eps=1e-6, sliding_window=v["window"], query_pre_attn_scalar=v["hd"],
            attn_logit_softcapping=v["attn_cap"], final_logit_softcapping=v["final_cap"],
            rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
            tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    if v["arch"] == "phi3":
        short, long = longrope_factors(v)
        del common["head_dim"]
        return transformers.Phi3Config(
            **common, rms_norm_eps=1e-5, sliding_window=v["window"], original_max_position_embeddings=v["orig_ctx"],
            rope_parameters={"rope_type": "longrope", "rope_theta": 10_000.0, "partial_rotary_factor": v["rot"],
                             "short_factor": short, "long_factor": long,
                             "original_max_position_embeddings": v["orig_ctx"]},
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if v["arch"] == "smollm3":
        return transformers.SmolLM3Config(**common, rms_norm_eps=1e-6,
                                          rope_parameters={"rope_type": "default", "rope_theta": 50_000.0},
                                          tie_word_embeddings=True, bos_token_id=v["vocab"] - 3,
                                          eos_token_id=v["vocab"] - 1, pad_token_id=v["vocab"] - 3)
    if v["arch"] == "mistral":
        return transformers.MistralConfig(**common, rms_norm_eps=1e-5, sliding_window=v["window"],
                                          rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
                                          tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    if v["arch"] == "gemma3":
        # llama.cpp scales queries by 1/sqrt(head_dim), except for the 62-layer Gemma 3 (27B), where
        # query_pre_attn_scalar = n_embd / n_head.
        qpas = v["embd"] // v["heads"] if v["layers"] == 62 else v["hd"]
        full = {"rope_type": "default", "rope_theta": 1_000_000.0}
        if v.get("linear"):
            full = {"rope_type": "linear", "factor": v["linear"], "rope_theta": 1_000_000.0}
        return transformers.Gemma3TextConfig(
            **common, rms_norm_eps=1e-6, sliding_window=v["window"], query_pre_attn_scalar=qpas,
            rope_parameters={"full_attention": full,
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
            tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    if v["arch"] == "qwen2":
        return transformers.Qwen2Config(**common, rms_norm_eps=1e-6,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                                        tie_word_embeddings=True, bos_token_id=v["vocab"] - 3,
                                        eos_token_id=v["vocab"] - 1, pad_token_id=v["vocab"] - 3)
    rope = {"rope_type": "default", "rope_theta": 10_000.0}
    if v.get("llama3"):
        rope = dict(v["llama3"], rope_type="llama3", rope_theta=500_000.0)
    # attention_bias=True also gives o_proj a bias, which GGUF llama has no tensor for: it is zeroed
    # and not written, leaving Q/K/V biases (the recipe's optional ones).
    return transformers.LlamaConfig(**common, rms_norm_eps=1e-5, rope_parameters=rope,
                                    attention_bias=bool(v.get("qkv_bias")),
                                    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)


@torch.no_grad()
def randomize(model, v):
    g = torch.Generator().manual_seed(SEED)
    for name, p in model.named_parameters():
        if "norm" in name:
            # Gemma's RMSNorm multiplies by (1 + w); the others by w.
            base = 0.0 if v["arch"] in ref.GEMMA_ARCHS else 1.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
        elif name.endswith("o_proj.bias"):
            p.zero_()
        elif name.endswith(".bias"):
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
        elif "embed_tokens" in name:
            # Gemma multiplies by sqrt(n_embd): keep the scaled rows near rms 1 so the layers, not the
            # input token's own row, decide the (tied) logits.
            p.copy_((1.0 / math.sqrt(v["embd"]) if v["arch"] in ref.GEMMA_ARCHS else 1.0) *
                    torch.randn(p.shape, generator=g))
        else:  # a Linear weight [out, in]
            p.copy_(1.5 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g))


def permute_qk(w, n_head):
    """llama.cpp's converter permutation of llama Q/K rows (weights and biases alike): per head, HF's
    rotate_half layout (two halves) becomes adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(v):
    """rope_freqs.weight as llama.cpp's converter writes it for Llama 3.1 rope scaling: the divisor of each
    frequency (1 for high frequencies, `factor` for low ones, smoothly in between)."""
    s = v["llama3"]
    base, dim = 500_000.0, v["hd"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(s["factor"])
        else:
            smooth = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / \
                     (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)


GGUF_LAYER = {v: k for k, v in ref.LAYER_NAMES.items()}
PHI3_GGUF = {v: k for k, v in ref.PHI3_NAMES.items()}


def gguf_name(hf, arch):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    _, _, idx, leaf = hf.split(".", 3)
    if leaf == "post_attention_layernorm.weight":
        leaf_g = "post_attention_norm.weight" if arch in ref.GEMMA_ARCHS else "ffn_norm.weight"
    elif arch == "phi3" and leaf in PHI3_GGUF:
        leaf_g = PHI3_GGUF[leaf]
    elif leaf == "pre_feedforward_layernorm.weight":
        leaf_g = "ffn_norm.weight"
    else:
        leaf_g = GGUF_LAYER[leaf]
    return "blk.%s.%s" % (idx, leaf_g)


def spm_tokenizer(w, v, specials, bos, eos, unk, pad=None):
    toks, scores, types = spm_vocab(v["vocab"], specials)
    w.add_tokenizer_model("llama"); w.add_tokenizer_pre("default")
    w.add_token_list(toks); w.add_token_scores(scores); w.add_token_types(types)
    w.add_bos_token_id(bos); w.add_eos_token_id(eos); w.add_unk_token_id(unk)
    if pad is not None:
        w.add_pad_token_id(pad)
    w.add_add_bos_token(True); w.add_add_eos_token(False)


def bpe_tokenizer(w, v, pre):
    toks, types, merges = bpe_vocab(v["vocab"], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre(pre)
    w.add_token_list(toks); w.add_token_types(types); w.add_token_merges(merges)
    w.add_bos_token_id(v["vocab"] - 3); w.add_eos_token_id(v["vocab"] - 1); w.add_pad_token_id(v["vocab"] - 3)
    w.add_add_bos_token(False)


def write_gguf(path, name, v, model):
    arch = v["arch"]
    garch = GGUF_ARCH.get(arch, arch)
    w = gguf.GGUFWriter(path, garch)
    w.add_name(name)
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[v["dtype"]]
    w.add_context_length(v.get("ctx", 256))
    w.add_embedding_length(v["embd"])
    w.add_block_count(v["layers"])
    w.add_feed_forward_length(v["ff"])
    w.add_head_count(v["heads"])
    w.add_head_count_kv(v["kv"])
    w.add_layer_norm_rms_eps(model.config.rms_norm_eps)
    w.add_file_type(ftype)
    if arch in ("gemma3", "gemma2"):
        w.add_key_length(v["hd"]); w.add_value_length(v["hd"])
        w.add_rope_freq_base(1_000_000.0 if arch == "gemma3" else 10_000.0)
        w.add_sliding_window(v["window"])
        if v.get("linear"):
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(v["linear"])
        if arch == "gemma2":
            w.add_attn_logit_softcapping(v["attn_cap"])
            w.add_final_logit_softcapping(v["final_cap"])
        spm_tokenizer(w, v, ["<pad>", "<eos>", "<bos>", "<unk>"], 2, 1, 3, pad=0)
    elif arch in ("qwen2", "qwen3"):
        w.add_rope_freq_base(1_000_000.0)
        if arch == "qwen3":
            w.add_key_length(v["hd"]); w.add_value_length(v["hd"])
        bpe_tokenizer(w, v, "qwen2")
    elif arch == "phi3":
        # as the converter writes Phi-3: rotated dimensions, original context, LongRoPE attention factor
        n_rot = int(v["rot"] * v["embd"]) // v["heads"]
        w.add_rope_scaling_orig_ctx_len(v["orig_ctx"])
        w.add_rope_dimension_count(n_rot)
        w.add_rope_freq_base(10_000.0)
        w.add_sliding_window(v["window"])
        scale = v["ctx"] / v["orig_ctx"]
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(v["orig_ctx"])))
        spm_tokenizer(w, v, ["<unk>", "<s>", "</s>"], 1, 2, 0, pad=0)
    else:  # llama layout: llama, mistral, smollm3
        w.add_rope_freq_base(float(model.config.rope_parameters["rope_theta"]))
        w.add_rope_dimension_count(v["hd"])
        if v["hd"] * v["heads"] != v["embd"]:
            w.add_key_length(v["hd"]); w.add_value_length(v["hd"])
        w.add_vocab_size(v["vocab"])
        if v.get("window"):
            w.add_sliding_window(v["window"])
        if arch == "smollm3":
            bpe_tokenizer(w, v, "smollm")
        else:
            spm_tokenizer(w, v, ["<unk>", "<s>", "</s>"], 1, 2, 0)

    if v.get("llama3"):
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(v))
    if arch == "phi3":
        short, long = longrope_factors(v)
        w.add_tensor("rope_factors_long.weight", np.array(long, dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(short, dtype=np.float32))
    tied = model.config.tie_word_embeddings
    for hf, p in model.state_dict().items():
        if hf == "lm_head.weight" and tied:
            continue
        if hf.endswith("o_proj.bias"):
            assert not p.any()
            continue
        a = p.detach().float().numpy().copy()
        g = gguf_name(hf, arch)
        if garch in ref.PERMUTED_ARCHS and g.endswith(("attn_q.weight", "attn_q.bias")):
            a = permute_qk(a, v["heads"])
        elif garch in ref.PERMUTED_ARCHS and g.endswith(("attn_k.weight", "attn_k.bias")):
            a = permute_qk(a, v["kv"])
        if arch in ref.GEMMA_ARCHS and g.endswith("norm.weight"):
            a = a + np.float32(1.0)
        if a.ndim == 1 or v["dtype"] == "f32":
            w.add_tensor(g, a.astype(np.float32))  # vectors stay F32, as the converter keeps them
        elif v["dtype"] == "f16":
            w.add_tensor(g, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(g, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file()
    w.close()


def reload_from_gguf(model, path, v):
    """Replaces the model's weights by what the GGUF holds (so the reference runs on exactly the file's
    values) and checks the round trip against the original weights."""
    tensors, reader = ref.dequantize_gguf(path)
    sd = ref.hf_state_dict_from_gguf(tensors, GGUF_ARCH.get(v["arch"], v["arch"]), v["heads"], v["kv"])
    orig = {k: t.detach().clone() for k, t in model.state_dict().items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied = model.config.tie_word_embeddings
    if unexpected or [k for k in missing if not (tied and k == "lm_head.weight") and not k.endswith("o_proj.bias")]:
        raise RuntimeError("state dict mismatch: missing %s, unexpected %s" % (missing, unexpected))
    tol = {"f32": 1e-6, "f16": 1e-3, "q8_0": 1e-2}[v["dtype"]]
    worst = 0.0
    for k, o in orig.items():
        n = model.state_dict()[k]
        rel = float((n - o).norm() / o.norm())
        worst = max(worst, rel)
        if rel > tol:
            raise RuntimeError("%s: GGUF round trip differs by rel-L2 %g (> %g): converter layout bug" % (k, rel, tol))
    return worst


def transformers_gguf_check(path, sd_model, v):
    """transformers' own GGUF loader must read the same weights from the file (it undoes the llama
    permutation and the Gemma +1 itself): evidence that the file follows the converter's conventions."""
    d, f = os.path.split(os.path.abspath(path))
    m = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    sd = {k: t.detach() for k, t in sd_model.state_dict().items()}
    if sd_model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    return ref.check_weights(m, sd)


def make(name, v, out_dir):
    print("%s:" % name, file=sys.stderr)
    torch.manual_seed(SEED)
    cfg = hf_config(v)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    randomize(model, v)
    path = os.path.join(out_dir, name + ".gguf")
    write_gguf(path, name, v, model)
    roundtrip = reload_from_gguf(model, path, v)
    if v.get("qkv_bias"):
        hf_check = "not applicable: transformers' GGUF config for llama has no attention_bias"
    elif v["arch"] in NO_HF_GGUF:
        hf_check = "not applicable: " + NO_HF_GGUF[v["arch"]]
    elif v["hd"] * v["heads"] != v["embd"]:
        hf_check = "not applicable: transformers' GGUF loader ignores attention.key_length (head_dim)"
    else:
        hf_check = "transformers' gguf_file= loader reads the same weights (max |diff| %g)" % \
            transformers_gguf_check(path, model, v)
    rng = np.random.default_rng(SEED + len(name))
    cfgd = model.config
    bpe = v["arch"] in BPE_ARCHS
    lo = 0 if bpe else (4 if v["arch"] in ref.GEMMA_ARCHS else 3)
    hi = v["vocab"] - (3 if bpe else 0)
    prompts = []
    for n in v["prompt_lens"]:
        ids = rng.integers(lo, hi, size=n).tolist()
        if not bpe:
            ids = [cfgd.bos_token_id] + ids[:-1]  # the SPM vocabularies add BOS by default
        prompts.append(("rand%d" % n, None, ids))
    extra = {
        "recipe": {k: val for k, val in v.items() if k != "prompt_lens"},
        "gguf_roundtrip_max_rel_l2": roundtrip,
        "weight_check": hf_check,
        "add_bos": not bpe,
    }
    ref.write_fixture(name, model, path, "fixtures", prompts, out_dir,
                      "transformers model from make_tiny_models.py's config; weights read back from the GGUF "
                      "(gguf dequantize, permutation and +1 undone)", extra=extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(VARIANTS))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "models"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for n in a.names:
        if n not in VARIANTS:
            sys.exit("unknown variant %s (known: %s)" % (n, list(VARIANTS)))
        make(n, VARIANTS[n], a.out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference fixtures for doppler's forward pass, computed with HuggingFace transformers.

The same GGUF file doppler loads is loaded into transformers in float32 (every weight dequantized with the
PyPI `gguf` package), run with eager attention, and summarised into a small JSON fixture per model plus one
raw float32 logits file per prompt (see README.md in this directory for the format and how to regenerate).

Usage (real models; files from ~/.cache/doppler/models unless --models-dir is given):
    python tools/reference/hf_reference.py [--models-dir DIR] [--out tests/fixtures/models] [gemma-3-270m smollm2-135m]

The tiny random-weight models are made (and their fixtures written through this module) by
make_tiny_models.py.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

import gguf
import transformers

N_GREEDY = 32      # greedy continuation length
N_SAMPLE = 64      # strided hidden-state sample size
N_TOP = 20         # top logits kept at the last prompt position
N_STEP_TOP = 5     # top logits kept per greedy step
FORMAT = "doppler-forward-ref-1"

# ----------------------------------------------------------------------------------------- prompts

PARAGRAPH = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
    "movable metal type, oil-based ink and a wooden screw press into a system that could produce books far "
    "faster than scribes. Within a few decades print shops had spread across Europe, from Venice to London, "
    "and the price of books fell sharply. Scholars could compare identical copies of a text, merchants "
    "printed price lists and calendars, and religious reformers used pamphlets to reach readers in their own "
    "languages. Historians still argue about how quickly literacy rose as a result, but most agree that"
)

PROMPTS = [
    ("sky", "The color of the sky is"),
    ("question", "Question: What is the boiling point of water at sea level in degrees Celsius?\nAnswer:"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'),
    ("list", "Things to pack for a day at the beach:\n1. Sunscreen\n2. A towel\n3."),
    ("french", "Le matin, je prends un café au lait et un croissant, puis je"),
    ("chinese", "天空是蓝色的，因为"),
    ("paragraph", PARAGRAPH),
]

REAL_MODELS = {
    "gemma-3-270m": "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
}

# ------------------------------------------------------------------------------------ GGUF reading

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gguf_field(reader, key, default=None):
    """A scalar or string metadata value, or default."""
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


def dequantize_gguf(path):
    """{gguf tensor name: float32 numpy array in numpy order (ne[1], ne[0])} and the reader."""
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        out[t.name] = np.ascontiguousarray(a.reshape(shape), dtype=np.float32)
    return out, reader


def unpermute_qk(w, n_head):
    """Undo llama.cpp's converter permutation of llama Q/K rows (weights and biases).

    The converter regroups each head's rows from HF's (2, head_dim/2) layout (rotate_half halves) into
    (head_dim/2, 2) (adjacent pairs): reshape(n_head, 2, hd/2, cols).swapaxes(1, 2). This is its inverse."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


GEMMA_ARCHS = ("gemma2", "gemma3")      # GGUF norm weights hold 1 + w
PERMUTED_ARCHS = ("llama", "smollm3")   # the converter permuted Q/K rows to adjacent pairs
# Phi-3 keeps HF's fused tensors under these GGUF names.
PHI3_NAMES = {"attn_qkv.weight": "self_attn.qkv_proj.weight", "ffn_up.weight": "mlp.gate_up_proj.weight"}


def hf_state_dict_from_gguf(tensors, arch, n_head, n_head_kv):
    """Builds a transformers state dict from dequantized GGUF tensors, undoing the converter's edits:
    llama Q/K row permutation, Gemma's +1 on every RMSNorm weight. rope_freqs and the LongRoPE factors
    are not parameters in transformers (it computes the frequencies from its config) and are dropped."""
    sd = {}
    for name, a in tensors.items():
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"):
            continue
        elif name.startswith("blk."):
            _, idx, rest = name.split(".", 2)
            if rest == "ffn_norm.weight":
                leaf = "pre_feedforward_layernorm.weight" if arch in GEMMA_ARCHS else "post_attention_layernorm.weight"
            elif rest == "post_attention_norm.weight":
                leaf = "post_attention_layernorm.weight"
            elif arch == "phi3" and rest in PHI3_NAMES:
                leaf = PHI3_NAMES[rest]
            else:
                leaf = LAYER_NAMES[rest]
            hf = "model.layers.%s.%s" % (idx, leaf)
            if arch in PERMUTED_ARCHS and rest in ("attn_q.weight", "attn_q.bias"):
                a = unpermute_qk(a, n_head)
            elif arch in PERMUTED_ARCHS and rest in ("attn_k.weight", "attn_k.bias"):
                a = unpermute_qk(a, n_head_kv)
        else:
            raise ValueError("unexpected tensor " + name)
        if arch in GEMMA_ARCHS and name.endswith("norm.weight"):
            a = a - np.float32(1.0)
        sd[hf] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    return sd


def load_transformers_gguf(path):
    """transformers' own GGUF loading (gguf_file=), float32, eager attention."""
    d, f = os.path.split(os.path.abspath(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=f, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    return model, tok


def check_weights(model, sd):
    """Every parameter of model must equal the state dict built here from the same file (so transformers
    undid the permutation / norm offset and left nothing at its random initialisation). Returns the
    largest absolute difference."""
    params = dict(model.named_parameters())
    tied = getattr(model.config, "tie_word_embeddings", False)
    worst = 0.0
    for name, p in params.items():
        ref = sd.get(name)
        if ref is None and name == "lm_head.weight" and tied:
            ref = sd["model.embed_tokens.weight"]
        if ref is None:
            raise RuntimeError("parameter %s has no tensor in the GGUF file" % name)
        if tuple(ref.shape) != tuple(p.shape):
            raise RuntimeError("parameter %s: shape %s vs file %s" % (name, tuple(p.shape), tuple(ref.shape)))
        worst = max(worst, float((p.detach().float() - ref).abs().max()))
    missing = set(sd) - set(params)
    if missing:
        raise RuntimeError("file tensors not used by transformers: %s" % sorted(missing))
    if worst > 1e-6:
        raise RuntimeError("transformers' GGUF weights differ from the gguf package's dequantization by %g" % worst)
    return worst

# -------------------------------------------------------------------------------------- summaries

def summary(vec, point, layer):
    v = np.asarray(vec, dtype=np.float32)
    dim = v.shape[0]
    stride = max(1, dim // N_SAMPLE)
    sample = v[0:stride * N_SAMPLE:stride][:N_SAMPLE]
    return {
        "point": point,
        "layer": layer,
        "dim": int(dim),
        "rms": float(np.sqrt(np.mean(v.astype(np.float64) ** 2))),
        "min": float(v.min()),
        "max": float(v.max()),
        "stride": int(stride),
        "sample": [float(x) for x in sample],
    }


class HiddenRecorder:
    """Forward hooks named like doppler's trace points; keeps the last position of each."""

    def __init__(self, model):
        self.active = False
        self.rows = {}
        inner = model.model
        self.handles = [inner.embed_tokens.register_forward_hook(self._hook("embed_scaled", -1)),
                        inner.norm.register_forward_hook(self._hook("final_norm", -1))]
        for i, layer in enumerate(inner.layers):
            self.handles.append(layer.register_forward_hook(self._hook("resid_ffn", i)))
        self.n_layer = len(inner.layers)

    def _hook(self, point, layer):
        def fn(module, args, out):
            if self.active:
                t = out[0] if isinstance(out, tuple) else out
                self.rows[(point, layer)] = t[0, -1].detach().float().numpy().copy()
        return fn

    def entries(self):
        keys = [("embed_scaled", -1)] + [("resid_ffn", i) for i in range(self.n_layer)] + [("final_norm", -1)]
        return [summary(self.rows[k], k[0], k[1]) for k in keys]

    def remove(self):
        for h in self.handles:
            h.remove()


def top_k(logits, k):
    vals, ids = torch.topk(logits, k)
    return [[int(i), float(v)] for i, v in zip(ids.tolist(), vals.tolist())]


@torch.no_grad()
def run_prompt(model, ids, eos_ids):
    """Prefill (hidden summaries, last-position logits) and a manual greedy loop with the KV cache.
    Never stops at EOS; records whether and where one appeared."""
    rec = HiddenRecorder(model)
    try:
        rec.active = True
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        rec.active = False
        hidden = rec.entries()
    finally:
        rec.remove()
    logits0 = out.logits[0, -1].float()
    past = out.past_key_values
    logits = logits0
    greedy, gaps, steps = [], [], []
    for k in range(N_GREEDY):
        top = top_k(logits, N_STEP_TOP)
        nxt = int(torch.argmax(logits))
        assert nxt == top[0][0]
        greedy.append(nxt)
        gaps.append(top[0][1] - top[1][1])
        steps.append(top)
        if k + 1 < N_GREEDY:
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
    eos_step = next((i for i, t in enumerate(greedy) if t in eos_ids), -1)
    return {
        "hidden": hidden,
        "logits": logits0.numpy().astype("<f4"),
        "top20": top_k(logits0, N_TOP),
        "greedy": {"ids": greedy, "top2_gap": gaps, "steps_top": steps,
                   "eos_seen": eos_step >= 0, "eos_step": eos_step},
    }


def versions():
    from importlib.metadata import version
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gguf": version("gguf"), "numpy": np.__version__, "python": sys.version.split()[0]}


def dump_json(o, ind=0):
    """JSON with objects one key a line and lists of numbers (or of [id, logit] pairs) on one line."""
    pad = " " * ind
    if isinstance(o, dict):
        if not o:
            return "{}"
        items = ['%s  %s: %s' % (pad, json.dumps(k), dump_json(v, ind + 2)) for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, list) and any(isinstance(x, dict) for x in o):
        return "[\n" + ",\n".join(pad + "  " + dump_json(x, ind + 2) for x in o) + "\n" + pad + "]"
    return json.dumps(o, ensure_ascii=False, separators=(", ", ": "))


def write_fixture(name, model, gguf_path, location, prompts, out_dir, loader, tokenizer=None, extra=None):
    """prompts: list of (prompt name, text or None, token ids). Writes <name>.json and <name>.<prompt>.f32."""
    cfg = model.config
    eos = cfg.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    entries = []
    for pname, text, ids in prompts:
        r = run_prompt(model, ids, eos_ids)
        fname = "%s.%s.f32" % (name, pname)
        r["logits"].tofile(os.path.join(out_dir, fname))
        e = {"name": pname}
        if text is not None:
            e["text"] = text
        e["ids"] = [int(i) for i in ids]
        if tokenizer is not None:
            e["pieces"] = tokenizer.convert_ids_to_tokens(list(ids))
            r["greedy"]["text"] = tokenizer.decode(r["greedy"]["ids"])
        e["logits_file"] = fname
        e["top20"] = r["top20"]
        e["hidden"] = r["hidden"]
        e["greedy"] = r["greedy"]
        entries.append(e)
        g = r["greedy"]
        print("  %-10s %3d tokens  top1 %d  min gap %.3g  %s" % (
            pname, len(ids), r["top20"][0][0], min(g["top2_gap"]), repr(g.get("text", g["ids"][:8]))[:100]),
            file=sys.stderr)
    fx = {
        "format": FORMAT,
        "name": name,
        "model": {
            "file": os.path.basename(gguf_path),
            "location": location,
            "sha256": sha256_file(gguf_path),
            "arch": getattr(cfg, "model_type", ""),
            "n_vocab": int(cfg.vocab_size),
            "n_layer": int(cfg.num_hidden_layers),
            "n_embd": int(cfg.hidden_size),
        },
        "reference": dict(versions(), dtype="float32", attn_implementation="eager", loader=loader,
                          script="tools/reference/" + ("make_tiny_models.py" if location == "fixtures" else
                                                       "hf_reference.py")),
        "n_greedy": N_GREEDY,
        "n_sample": N_SAMPLE,
        "prompts": entries,
    }
    if extra:
        fx["reference"].update(extra)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        f.write(dump_json(fx) + "\n")
    print("wrote %s" % os.path.join(out_dir, name + ".json"), file=sys.stderr)

# ------------------------------------------------------------------------------------------- main

def real_model(name, path, out_dir):
    print("%s: %s" % (name, path), file=sys.stderr)
    model, tok = load_transformers_gguf(path)
    cfg = model.config
    tensors, reader = dequantize_gguf(path)
    arch = str(gguf_field(reader, "general.architecture"))
    sd = hf_state_dict_from_gguf(tensors, arch, cfg.num_attention_heads, cfg.num_key_value_heads)
    worst = check_weights(model, sd)
    del tensors, sd
    prompts = []
    for pname, text in PROMPTS:
        ids = tok(text).input_ids  # the tokenizer's default BOS handling
        prompts.append((pname, text, ids))
    extra = {"weight_check": "every parameter equals the gguf package's dequantization (max |diff| %g)" % worst,
             "add_bos": bool(gguf_field(reader, "tokenizer.ggml.add_bos_token", False))}
    write_fixture(name, model, path, "cache", prompts, out_dir, "transformers from_pretrained(gguf_file=)",
                  tokenizer=tok, extra=extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=sorted(REAL_MODELS), help="fixture names: %s" % sorted(REAL_MODELS))
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/doppler/models"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "models"))
    a = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    for name in a.models:
        if name not in REAL_MODELS:
            sys.exit("unknown model %s (known: %s)" % (name, sorted(REAL_MODELS)))
        real_model(name, os.path.join(a.models_dir, REAL_MODELS[name]), a.out)


if __name__ == "__main__":
    main()

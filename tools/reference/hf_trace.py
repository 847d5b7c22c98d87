#!/usr/bin/env python3
"""Writes a doppler `.trace` file (docs/trace-format.md) from HuggingFace transformers running the same GGUF.

    hf_trace.py --gguf FILE (--prompt TEXT | --tokens ID,ID,...) [--points a,b] [--layers 0,5]
                [--positions all|last|N,M] [--no-bos] [--no-weight-check] -o out.trace

One prefill forward in float32 with eager attention (the model is loaded like hf_reference.py does: transformers'
own `gguf_file=` loader, every parameter checked against the `gguf` package's dequantization unless
--no-weight-check). Forward hooks capture the trace points doppler names (include/doppler.h, src/cpu/forward.c);
the mapping from each point to the transformers module that produces it is written out per architecture in
POINT_MAP below. Then compare with doppler:

    doppler trace dump -m FILE --tokens ID,... -o mine.trace
    doppler trace compare mine.trace hf.trace --tol 1e-3

The header has the fields doppler writes (format, version, dtype, data_offset, model, backend
"hf-transformers <version>", tokens, points, entries in doppler's forward order) plus a `reference` object
(versions, the file's sha256). `points` lists the selected points this architecture produces (q_normed/k_normed
only with q/k norms, post_attn_norm/post_ffn_norm only with sandwich norms); a selected point the architecture
does not have is left out with a note on stderr. `logits` is the last position only, as doppler computes it.

Q/K order: llama.cpp's converter permutes the rows of llama attn_q/attn_k (and their biases) per head from HF's
rotate-half layout (two halves) to adjacent pairs, so that doppler's adjacent-pair RoPE on the file's rows equals
HF's rotate_half RoPE. doppler's q, k, q_rope, k_rope vectors are therefore in GGUF (permuted) order; for llama
this script applies the same permutation per head to HF's vectors before writing (PERMUTE_QK). Gemma 3 and
Qwen2 use NeoX (half) RoPE in both and are not permuted. attn_out and everything after it are in V's order,
which the converter does not permute.

Environment: the venv of tools/reference/README.md (requirements.txt). Exit codes: 0 ok, 2 bad input.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402  (loading and weight checking, shared with the forward fixtures)

from trace_points import (DEFAULT_OFF, GLOBAL_POINTS, PERMUTE_QK, POINT_MAP, POINTS,  # noqa: E402
                          ROPE_MODULE)


def die(msg, code=2):
    print("hf_trace.py: " + msg, file=sys.stderr)
    sys.exit(code)


def permute_to_gguf(rows, n_head):
    """HF's per-head layout (2, hd/2) -> the converter's (hd/2, 2), as llama.cpp's converter permutes the
    rows of attn_q/attn_k: reshape(n_head, 2, hd/2).swapaxes. rows: [n, n_head * hd]."""
    n, d = rows.shape
    hd = d // n_head
    return rows.reshape(n, n_head, 2, hd // 2).swapaxes(2, 3).reshape(n, d)


def to_rows(t, n_pos):
    """A captured tensor -> [n_pos, dim] float32 numpy. [1, s, d] as is; per-head [1, h, s, x] -> [s, h*x]."""
    t = t.detach().to(torch.float32)
    if t.dim() == 4:
        if t.shape[0] != 1 or t.shape[2] != n_pos:
            raise RuntimeError("unexpected per-head shape %s" % (tuple(t.shape),))
        t = t[0].transpose(0, 1).reshape(n_pos, -1)
    elif t.dim() == 3:
        if t.shape[0] != 1 or t.shape[1] != n_pos:
            raise RuntimeError("unexpected shape %s" % (tuple(t.shape),))
        t = t[0]
    else:
        raise RuntimeError("unexpected shape %s" % (tuple(t.shape),))
    return np.ascontiguousarray(t.numpy(), dtype=np.float32)

# -------------------------------------------------------------------------------------- capture


class Capture:
    """Installs the hooks for the selected (point, layer) pairs and collects [n_pos, dim] arrays."""

    def __init__(self, model, arch, points, layers, ids):
        self.model, self.arch, self.ids = model, arch, ids
        self.n_pos = len(ids)
        self.got = {}
        self.handles = []
        self.rope_owner = None      # attention module currently running
        self.rope_wanted = {}       # attention module -> [(point, layer, "rope_q"/"rope_k")]
        mods = dict(model.named_modules())
        table = POINT_MAP[arch]
        for point in points:
            path, how = table[point]
            for layer in ([-1] if point in GLOBAL_POINTS else layers):
                name = path.format(L=layer)
                mod = mods.get(name)
                if mod is None:
                    raise RuntimeError("mapping: %s layer %d: no module %s in this model" % (point, layer, name))
                self._install(mod, point, layer, how)
        if self.rope_wanted:
            self._wrap_rope()

    def _store(self, point, layer, rows):
        key = (point, layer)
        if key in self.got:
            raise RuntimeError("mapping: %s layer %d produced twice in one forward" % key)
        self.got[key] = rows

    def _install(self, mod, point, layer, how):
        n = self.n_pos
        if how == "rows":
            w = mod.weight.detach()[torch.tensor(self.ids)]
            self._store(point, layer, np.ascontiguousarray(w.to(torch.float32).numpy()))
        elif how == "out":
            def fn(m, args, out):
                self._store(point, layer, to_rows(out[0] if isinstance(out, tuple) else out, n))
            self.handles.append(mod.register_forward_hook(fn))
        elif how == "out_bshd":
            def fn(m, args, out):
                t = out[0] if isinstance(out, tuple) else out
                self._store(point, layer, np.ascontiguousarray(t.detach().to(torch.float32)[0].reshape(n, -1).numpy()))
            self.handles.append(mod.register_forward_hook(fn))
        elif how.startswith("part"):
            cfg = self.model.config
            hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
            q, kv, f = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size
            sizes = [q, kv, kv] if mod.out_features == q + 2 * kv else [f, f]
            i = int(how[4:])
            lo = sum(sizes[:i])

            def fn(m, args, out):
                self._store(point, layer, to_rows(out, n)[:, lo:lo + sizes[i]].copy())
            self.handles.append(mod.register_forward_hook(fn))
        elif how in ("rope_q", "rope_k") and not getattr(mod, "use_rope", True):
            # a NoPE layer (SmolLM3): no rotation, doppler's q_rope/k_rope are the projections
            self._install(mod.q_proj if how == "rope_q" else mod.k_proj, point, layer, "out")
        elif how == "last":
            def fn(m, args, out):
                t = out[0] if isinstance(out, tuple) else out
                self._store(point, layer, np.ascontiguousarray(t[0, -1:].detach().to(torch.float32).numpy()))
            self.handles.append(mod.register_forward_hook(fn))
        elif how == "in":
            def fn(m, args, kwargs):
                x = args[0] if args else next(iter(kwargs.values()))
                self._store(point, layer, to_rows(x, n))
            self.handles.append(mod.register_forward_pre_hook(fn, with_kwargs=True))
        elif how == "attn_weights":
            def fn(m, args, out):
                w = out[1] if isinstance(out, tuple) and len(out) > 1 else None
                if w is None:
                    raise RuntimeError("attention returned no weights (needs attn_implementation='eager')")
                # [1, h, q, kv] -> rows [q][h*kv], like doppler's [n_head][n_kv] per position
                w = w.detach().to(torch.float32)[0].transpose(0, 1)
                self._store(point, layer, np.ascontiguousarray(w.reshape(n, -1).numpy()))
            self.handles.append(mod.register_forward_hook(fn))
        elif how in ("rope_q", "rope_k"):
            if mod not in self.rope_wanted:
                self.rope_wanted[mod] = []

                def pre(m, args, kwargs):
                    self.rope_owner = m

                def post(m, args, out):
                    self.rope_owner = None
                self.handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
                self.handles.append(mod.register_forward_hook(post))
            self.rope_wanted[mod].append((point, layer, how))
        else:
            raise ValueError(how)

    def _wrap_rope(self):
        import importlib
        mm = importlib.import_module(ROPE_MODULE[self.arch])
        orig = mm.apply_rotary_pos_emb
        cap = self

        def wrapped(q, k, *a, **kw):
            qe, ke = orig(q, k, *a, **kw)
            for point, layer, how in cap.rope_wanted.get(cap.rope_owner, []):
                cap._store(point, layer, to_rows(qe if how == "rope_q" else ke, cap.n_pos))
            return qe, ke
        mm.apply_rotary_pos_emb = wrapped
        self.rope_restore = (mm, orig)

    def remove(self):
        for h in self.handles:
            h.remove()
        if hasattr(self, "rope_restore"):
            mm, orig = self.rope_restore
            mm.apply_rotary_pos_emb = orig

# --------------------------------------------------------------------------------------- loading
#
# transformers' GGUF loader (gguf_file=) builds the config from the file's metadata, but not everything a GGUF
# means reaches it. load_model applies these fix-ups, each recorded in the header's reference.fixups:
#   gemma3  query_pre_attn_scalar: GGUF has no key for it and transformers keeps its default 256. llama.cpp (and
#           doppler) scale queries by 1/sqrt(head_dim), except the 62-layer Gemma 3 (27B): 1/sqrt(n_embd/n_head).
#           For Gemma 3 270M head_dim is 256, so this changes nothing there.
#   llama   Q/K/V biases in the file (attn_q.bias, ...): the loader builds a model without biases and drops them;
#           the model is rebuilt with attention_bias=True and loaded from the checked state dict (o_proj.bias,
#           which GGUF llama has no tensor for, zero).
#   RoPE    the frequencies llama.cpp and doppler use: 1/theta^(2i/d), divided by rope_freqs[i] when the file has
#           rope_freqs.weight (Llama 3.1 scaling) and by the factor of `<arch>.rope.scaling.type = linear` (on
#           Gemma 3 only the global layers; sliding layers keep theta 10000 unscaled). The loader reads neither
#           rope_freqs nor the linear factor; the rotary embedding's inv_freq is set to these when it differs.


def load_model(path, check):
    model, tok = ref.load_transformers_gguf(path)
    cfg = model.config
    arch = "gemma3" if cfg.model_type == "gemma3_text" else cfg.model_type
    if arch not in POINT_MAP:
        die("architecture '%s' has no point mapping (known: %s)" % (arch, ", ".join(sorted(POINT_MAP))))
    reader = ref.gguf.GGUFReader(path)
    gguf_arch = str(ref.gguf_field(reader, "general.architecture"))
    if gguf_arch != arch:
        die("file says architecture %s, transformers built %s" % (gguf_arch, arch))
    names = {t.name for t in reader.tensors}
    fixups = []
    has_bias = "blk.0.attn_q.bias" in names
    need_rebuild = arch == "llama" and has_bias and model.model.layers[0].self_attn.q_proj.bias is None
    sd = None
    if check or need_rebuild:
        tensors, _ = ref.dequantize_gguf(path)
        sd = ref.hf_state_dict_from_gguf(tensors, arch, cfg.num_attention_heads, cfg.num_key_value_heads)
        del tensors
    if need_rebuild:
        cfg.attention_bias = True
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                              attn_implementation="eager")
        for i, layer in enumerate(model.model.layers):
            sd["model.layers.%d.self_attn.o_proj.bias" % i] = torch.zeros_like(layer.self_attn.o_proj.bias)
        res = model.load_state_dict(sd, strict=False)
        tied = getattr(cfg, "tie_word_embeddings", False)
        if res.unexpected_keys or [k for k in res.missing_keys if not (tied and k == "lm_head.weight")]:
            raise RuntimeError("rebuilt model: missing %s, unexpected %s" % (res.missing_keys, res.unexpected_keys))
        if tied:
            model.tie_weights()
        model.eval()
        fixups.append("llama Q/K/V biases: rebuilt with attention_bias=True (o_proj.bias zero)")
    if arch == "gemma3":
        qpas = cfg.hidden_size // cfg.num_attention_heads if cfg.num_hidden_layers == 62 else cfg.head_dim
        if cfg.query_pre_attn_scalar != qpas:
            fixups.append("gemma3 query_pre_attn_scalar %s -> %s" % (cfg.query_pre_attn_scalar, qpas))
            cfg.query_pre_attn_scalar = qpas
            for layer in model.model.layers:
                layer.self_attn.scaling = qpas ** -0.5
    fix_rope(model, reader, arch, names, fixups)
    weight_check = "skipped"
    if check:
        weight_check = "every parameter equals the gguf package's dequantization (max |diff| %g)" % \
            ref.check_weights(model, sd)
    for f in fixups:
        print("hf_trace.py: fix-up: " + f, file=sys.stderr)
    return model, tok, arch, fixups, weight_check


def load_tiny(path, name):
    """A tiny model of make_tiny_models.py: its own config (which carries what the GGUF loader cannot read:
    head_dim, LongRoPE, NoPE layers, Mistral's window) and the file's weights (dequantized, permutation and
    Gemma's +1 undone), loaded strictly."""
    import make_tiny_models as mt
    if name not in mt.VARIANTS:
        die("--tiny: unknown model %s (known: %s)" % (name, ", ".join(mt.VARIANTS)))
    v = mt.VARIANTS[name]
    reader = ref.gguf.GGUFReader(path)
    garch = mt.GGUF_ARCH.get(v["arch"], v["arch"])
    if str(ref.gguf_field(reader, "general.architecture")) != garch:
        die("%s is not a %s file" % (path, garch))
    model = transformers.AutoModelForCausalLM.from_config(mt.hf_config(v), dtype=torch.float32,
                                                          attn_implementation="eager")
    tensors, _ = ref.dequantize_gguf(path)
    sd = ref.hf_state_dict_from_gguf(tensors, garch, v["heads"], v["kv"])
    res = model.load_state_dict(sd, strict=False)
    tied = model.config.tie_word_embeddings
    if res.unexpected_keys or [k for k in res.missing_keys if not (tied and k == "lm_head.weight")]:
        die("%s: missing %s, unexpected %s" % (path, res.missing_keys, res.unexpected_keys))
    if tied:
        model.tie_weights()
    model.eval()
    check = "make_tiny_models.py's config for %s; every parameter loaded from the file" % name
    return model, None, v["arch"], [], check


def fix_rope(model, reader, arch, names, fixups):
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    scale = 1.0
    stype = ref.gguf_field(reader, "%s.rope.scaling.type" % arch)
    if stype is not None and str(stype) not in ("none", "linear"):
        die("rope.scaling.type '%s' is not supported here" % stype)
    if str(stype) == "linear":
        scale = float(ref.gguf_field(reader, "%s.rope.scaling.factor" % arch, 1.0))
    factors = None
    if "rope_freqs.weight" in names:
        rf = next(t for t in reader.tensors if t.name == "rope_freqs.weight")
        factors = torch.from_numpy(np.asarray(rf.data, dtype=np.float32).reshape(-1).copy())

    def freqs(theta, s):
        f = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float) / d))
        if factors is not None:
            f = f / factors
        return f / s

    rot = model.model.rotary_emb
    if arch == "gemma3":
        targets = [("full_attention_", freqs(cfg.rope_parameters["full_attention"]["rope_theta"], scale)),
                   ("sliding_attention_", freqs(10000.0, 1.0))]
    else:
        targets = [("", freqs(cfg.rope_parameters["rope_theta"], scale))]
    for prefix, want in targets:
        have = getattr(rot, prefix + "inv_freq", None)
        if have is None:
            continue
        have = have.detach().float()
        if have.shape == want.shape and float(((have - want).abs() / want).max()) <= 1e-6 and \
                getattr(rot, prefix + "attention_scaling") == 1.0:
            continue
        setattr(rot, prefix + "inv_freq", want.clone())
        setattr(rot, prefix + "original_inv_freq", want.clone())
        setattr(rot, prefix + "attention_scaling", 1.0)
        fixups.append("%sinv_freq: 1/theta^(2i/d)%s%s" % (prefix, " / rope_freqs" if factors is not None else "",
                                                          " / %g (linear)" % scale if scale != 1.0 else ""))


# ----------------------------------------------------------------------------------------- output


def expected_dim(point, cfg, n_pos):
    """doppler's dim of each point (src/cpu/forward.c)."""
    E, NH, NKV = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    HD = getattr(cfg, "head_dim", None) or E // NH
    if point in ("q", "q_normed", "q_rope", "attn_out"):
        return NH * HD
    if point in ("k", "v", "k_normed", "k_rope"):
        return NKV * HD
    if point in ("gate", "up", "act"):
        return cfg.intermediate_size
    if point == "attn_scores":
        return NH * n_pos
    if point == "logits":
        return cfg.vocab_size
    return E


def write_trace(path, header, blobs):
    """One-line JSON header padded with spaces to a multiple of 64 bytes (newline included), then the data."""
    off = 0
    for _ in range(8):
        header["data_offset"] = off
        txt = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        need = (len(txt) + 1 + 63) // 64 * 64
        if need == off:
            break
        off = need
    with open(path, "wb") as f:
        f.write(txt + b" " * (off - len(txt) - 1) + b"\n")
        for b in blobs:
            f.write(b.astype("<f4", copy=False).tobytes())


def parse_list(flag, s, lo, hi):
    out = []
    for part in s.split(","):
        try:
            v = int(part)
        except ValueError:
            die("%s expects comma-separated integers, got '%s'" % (flag, s))
        if v < lo or v > hi:
            die("%s: %d is outside [%d, %d]" % (flag, v, lo, hi))
        out.append(v)
    return sorted(set(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="GGUF model file")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (HF's tokenizer from the same GGUF, its default BOS)")
    src.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--no-bos", action="store_true", help="with --prompt: do not add BOS")
    ap.add_argument("--points", help="points (default: all except attn_scores)")
    ap.add_argument("--layers", help="layers, e.g. 0,5 (default: all)")
    ap.add_argument("--positions", default="all", help="all (default), last, or N,M")
    ap.add_argument("--no-weight-check", action="store_true", help="skip comparing every weight with gguf's")
    ap.add_argument("--tiny", metavar="NAME", help="a make_tiny_models.py model: build it from its own config "
                    "(needs --tokens)")
    ap.add_argument("-o", "--out", required=True, help="output .trace file")
    a = ap.parse_args()

    if a.points:
        points = [p for p in a.points.split(",") if p]
        bad = [p for p in points if p not in POINTS]
        if bad or not points:
            die("unknown trace point '%s' (known: %s)" % (",".join(bad), ",".join(POINTS)))
    else:
        points = [p for p in POINTS if p not in DEFAULT_OFF]
    if not os.path.isfile(a.gguf):
        die("cannot open %s" % a.gguf)

    if a.tiny and a.tokens is None:
        die("--tiny needs --tokens")
    if a.tiny:
        model, tok, arch, fixups, weight_check = load_tiny(a.gguf, a.tiny)
    else:
        model, tok, arch, fixups, weight_check = load_model(a.gguf, not a.no_weight_check)
    cfg = model.config

    if a.tokens is not None:
        try:
            ids = [int(x) for x in a.tokens.split(",")]
        except ValueError:
            die("--tokens expects comma-separated ids, got '%s'" % a.tokens)
        if not ids or any(i < 0 or i >= cfg.vocab_size for i in ids):
            die("--tokens expects ids in [0, %d), got '%s'" % (cfg.vocab_size, a.tokens))
    else:
        ids = tok(a.prompt, add_special_tokens=not a.no_bos).input_ids
        if not ids:
            die("the prompt produced no tokens")
    n = len(ids)
    n_layer = cfg.num_hidden_layers
    layers = parse_list("--layers", a.layers, 0, n_layer - 1) if a.layers else list(range(n_layer))
    if a.positions == "all":
        positions = None
    elif a.positions == "last":
        positions = [n - 1]
    else:
        positions = parse_list("--positions", a.positions, 0, n - 1)

    table = POINT_MAP[arch]
    missing = [p for p in points if p not in table]
    if missing:
        print("hf_trace.py: %s has no %s; left out" % (arch, ",".join(missing)), file=sys.stderr)
    points = [p for p in POINTS if p in points and p in table]  # forward order

    cap = Capture(model, arch, points, layers, ids)
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        cap.remove()

    perm = PERMUTE_QK.get(arch, {})
    entries, blobs, off = [], [], 0
    # doppler's forward order: embed, embed_scaled; per layer its points in order; final_norm, logits
    order = [(p, -1) for p in points if p in ("embed", "embed_scaled")]
    order += [(p, l) for l in layers for p in points if p not in GLOBAL_POINTS]
    order += [(p, -1) for p in points if p in ("final_norm", "logits")]
    for point, layer in order:
        rows = cap.got.get((point, layer))
        if rows is None:
            raise RuntimeError("mapping: %s layer %d was never produced" % (point, layer))
        want = expected_dim(point, cfg, n)
        want_rows = 1 if point == "logits" else n
        if rows.shape != (want_rows, want):
            raise RuntimeError("%s layer %d: shape %s, doppler's is %s" % (point, layer, rows.shape,
                                                                           (want_rows, want)))
        if point in perm:
            rows = permute_to_gguf(rows, cfg.num_attention_heads if perm[point] == "q"
                                   else cfg.num_key_value_heads)
        pos0 = n - 1 if point == "logits" else 0
        if positions is None:
            chunks = [(pos0, rows)]
        else:
            chunks = [(p, rows[p - pos0:p - pos0 + 1]) for p in positions if pos0 <= p < pos0 + len(rows)]
        for p, r in chunks:
            r = np.ascontiguousarray(r, dtype=np.float32)
            entries.append({"point": point, "layer": layer, "pos0": p, "n_pos": int(r.shape[0]),
                            "dim": int(r.shape[1]), "offset": off, "shape": [int(r.shape[0]), int(r.shape[1])]})
            blobs.append(r)
            off += r.nbytes

    from importlib.metadata import version
    header = {
        "format": "doppler-trace",
        "version": 1,
        "dtype": "<f4",
        "model": os.path.basename(a.gguf),
        "backend": "hf-transformers %s" % transformers.__version__,
        "tokens": [int(i) for i in ids],
        "points": points,
        "entries": entries,
        "reference": {"script": "tools/reference/hf_trace.py", "arch": arch, "sha256": ref.sha256_file(a.gguf),
                      "torch": torch.__version__, "transformers": transformers.__version__,
                      "gguf": version("gguf"), "numpy": np.__version__, "dtype": "float32",
                      "attn_implementation": "eager", "weight_check": weight_check, "fixups": fixups,
                      "qk_order": "gguf (llama rows permuted like the converter)" if perm else "hf = gguf"},
    }
    write_trace(a.out, header, blobs)
    print("wrote %s: %d entries, %.2f MB, %d tokens, %d points, %d layers" % (
        a.out, len(entries), off / 1e6, n, len(points), len(layers)), file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference perplexity with HuggingFace transformers, computed exactly the way
llama.cpp's `perplexity` (and `doppler perplexity`) does:

  * tokenize the whole text once, with BOS when the tokenizer adds one;
  * split it into floor(n_tokens / ctx) non-overlapping windows of ctx tokens;
  * when the model adds BOS, the first token of every window is replaced by BOS;
  * evaluate each window from an empty cache and score only its second half:
    the logits at positions ctx/2 .. ctx-2 predict the tokens at ctx/2+1 .. ctx-1;
  * PPL = exp(mean NLL) over all scored tokens, +/- PPL * sqrt(var(NLL) / (N - 1)).

The model is the GGUF file itself, loaded by transformers (which dequantizes
every tensor to float32), so doppler and this script see the same weights.

Writes, for each model and context size, tests/fixtures/perplexity/<name>-ctx<C>.json
with the token ids, the cumulative PPL after each window, and the final PPL.

Environment (CPU only, no network needed once the models are cached):
    python3 -m venv .venv-ref
    .venv-ref/bin/pip install --index-url https://download.pytorch.org/whl/cpu torch
    .venv-ref/bin/pip install transformers gguf numpy sentencepiece tokenizers protobuf
  (used here: torch 2.15, transformers 5.23, gguf 0.19)

Usage:
    python3 tools/reference/hf_perplexity.py [--models DIR] [--text docs/text/alice-ch1.txt]
        [--ctx 256 512] [--out tests/fixtures/perplexity]
"""
import argparse
import hashlib
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

MODELS = {
    "gemma-3-270m-q4_k_m": "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m-instruct-q4_1": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def perplexity(model, tokens, ctx, bos_id):
    n_chunks = len(tokens) // ctx
    first = ctx // 2
    nll = nll2 = 0.0
    count = 0
    per_chunk = []
    for i in range(n_chunks):
        window = list(tokens[i * ctx:(i + 1) * ctx])
        if bos_id is not None:
            window[0] = bos_id
        with torch.no_grad():
            logits = model(torch.tensor([window])).logits[0].to(torch.float64)
        logp = torch.log_softmax(logits[first:ctx - 1], dim=-1)
        target = torch.tensor(window[first + 1:ctx])
        v = -logp[torch.arange(ctx - 1 - first), target]
        nll += float(v.sum())
        nll2 += float((v * v).sum())
        count += ctx - 1 - first
        per_chunk.append(math.exp(nll / count))
        print(f"[{i + 1}]{per_chunk[-1]:.4f}", end=",", flush=True)
    print()
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(var / (count - 1)) if var > 0 else 0.0
    return ppl, err, per_chunk, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/doppler/models"))
    ap.add_argument("--text", default="docs/text/alice-ch1.txt")
    ap.add_argument("--ctx", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--out", default="tests/fixtures/perplexity")
    ap.add_argument("--only", nargs="*", help="subset of: " + ", ".join(MODELS))
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    text = open(a.text, encoding="utf-8").read()
    os.makedirs(a.out, exist_ok=True)
    for name, file in MODELS.items():
        if a.only and name not in a.only:
            continue
        path = os.path.join(a.models, file)
        if not os.path.exists(path):
            print(f"{path}: missing, skipped", file=sys.stderr)
            continue
        tok = AutoTokenizer.from_pretrained(a.models, gguf_file=file)
        model = AutoModelForCausalLM.from_pretrained(a.models, gguf_file=file, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        tokens = tok(text)["input_ids"]
        add_bos = bool(tokens) and tok.bos_token_id is not None and tokens[0] == tok.bos_token_id
        bos_id = tok.bos_token_id if add_bos else None
        for ctx in a.ctx:
            print(f"{name}: {len(tokens)} tokens, ctx {ctx}, bos {bos_id}")
            ppl, err, per_chunk, count = perplexity(model, tokens, ctx, bos_id)
            print(f"{name} ctx {ctx}: PPL = {ppl:.4f} +/- {err:.5f}")
            out = {
                "model": file,
                "model_sha256": sha256(path),
                "text": os.path.basename(a.text),
                "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "reference": "HF transformers %s, torch %s, float32 weights dequantized from the GGUF" % (
                    __import__("transformers").__version__, torch.__version__),
                "ctx": ctx,
                "add_bos": add_bos,
                "n_tokens": len(tokens),
                "n_chunks": len(per_chunk),
                "scored_per_chunk": ctx - 1 - ctx // 2,
                "ppl": ppl,
                "ppl_err": err,
                "ppl_after_chunk": per_chunk,
                "tokens": tokens,
            }
            with open(os.path.join(a.out, f"{name}-ctx{ctx}.json"), "w") as f:
                json.dump(out, f)
                f.write("\n")


if __name__ == "__main__":
    main()

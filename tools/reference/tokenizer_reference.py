#!/usr/bin/env python3
"""Expected token ids for the tokenizer corpus, from HuggingFace tokenizers.

    python tools/reference/tokenizer_reference.py [--models DIR] [--shared DIR]

venv: Python 3.11 with transformers>=5, tokenizers, gguf, sentencepiece, jinja2
(the project's reference venv: pip install transformers tokenizers gguf
sentencepiece jinja2 torch; torch is only imported by transformers).

Sources (one fixture file per tokenizer in tests/fixtures/tokenizer/):
  gemma3   AutoTokenizer.from_pretrained(models, gguf_file=gemma-3-270m-q4_k_m.gguf)
  smollm2  AutoTokenizer.from_pretrained(models, gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf)
  qwen2    tokenizers.Tokenizer from the Qwen tokenizer.json in the shared fixtures
  llama3   tokenizers.Tokenizer from the Llama 3 tokenizer.json in the shared fixtures
For every corpus entry: the ids with special tokens parsed (the HF default,
BOS added as the model adds it), the ids where they differ when special
tokens are not parsed (split_special_tokens / encode_special_tokens), and the
decoded text (after the BOS the tokenizer adds) where decode(encode(x)) != x.
"""
import argparse
import gzip
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "tests", "fixtures", "tokenizer")


class HFAuto:
    def __init__(self, models, gguf):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(models, gguf_file=gguf)
        self.tok_split = AutoTokenizer.from_pretrained(models, gguf_file=gguf, split_special_tokens=True)
        self.add_bos = bool(getattr(self.tok, "add_bos_token", False))

    def encode(self, s, special=True):
        t = self.tok if special else self.tok_split
        return t.encode(s, add_special_tokens=True)

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


class HFJson:
    def __init__(self, path):
        from tokenizers import Tokenizer
        data = gzip.open(path).read().decode() if path.endswith(".gz") else open(path).read()
        self.tok = Tokenizer.from_str(data)
        self.tok_split = Tokenizer.from_str(data)
        self.tok_split.encode_special_tokens = True
        self.add_bos = False

    def encode(self, s, special=True):
        return (self.tok if special else self.tok_split).encode(s, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/doppler/models"))
    ap.add_argument("--shared", default=os.environ.get("DOPPLER_SHARED_FIXTURES") or
                    os.path.join(HERE, "..", "..", "..", "shared", "fixtures"))
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    lines = json.load(open(os.path.join(FIX, "corpus.json"), encoding="utf-8"))["lines"]
    specs = [
        ("gemma3", "gemma-3-270m-q4_k_m.gguf",
         lambda: HFAuto(a.models, "gemma-3-270m-q4_k_m.gguf"),
         "transformers AutoTokenizer.from_pretrained(gguf_file=gemma-3-270m-q4_k_m.gguf)"),
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
         lambda: HFAuto(a.models, "SmolLM2-135M-Instruct.Q4_1.gguf"),
         "transformers AutoTokenizer.from_pretrained(gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf)"),
        ("qwen2", "qwen2-tokenizer-tiny.gguf",
         lambda: HFJson(os.path.join(a.shared, "qwen2-tokenizer", "tokenizer.json.gz")),
         "tokenizers.Tokenizer(qwen2-tokenizer/tokenizer.json: Qwen2.5/Qwen3 BPE vocabulary and merges)"),
        ("llama3", "llama3-tokenizer-tiny.gguf",
         lambda: HFJson(os.path.join(a.shared, "llama3-tokenizer", "tokenizer.json.gz")),
         "tokenizers.Tokenizer(llama3-tokenizer/tokenizer.json)"),
    ]
    for name, model, make, source in specs:
        if a.only and name not in a.only.split(","):
            continue
        t0 = time.time()
        tok = make()
        special, plain, decoded = [], {}, {}
        for i, s in enumerate(lines):
            ids = tok.encode(s, True)
            special.append(ids)
            p = tok.encode(s, False)
            if p != ids:
                plain[str(i)] = p
            d = tok.decode(ids[1:] if tok.add_bos and ids else ids)  # the text after the BOS it adds
            if d != s:
                decoded[str(i)] = d
        out = {"tokenizer": name, "model": model, "source": source, "add_bos": tok.add_bos,
               "n_lines": len(lines), "special": special, "plain": plain, "decoded": decoded}
        with open(os.path.join(FIX, f"expected_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"{name}: {len(lines)} lines, {sum(map(len, special))} tokens, {len(plain)} differ without special "
              f"parsing, {len(decoded)} decode differently, {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A small Llama-2-style SentencePiece vocabulary and its expected ids.

No real Llama 2 / TinyLlama file is at hand, so this trains a SentencePiece
BPE model (vocab 1000, byte fallback) on the first half of the tokenizer
corpus, stores its vocabulary (pieces, scores, types; add_space_prefix and BOS
as Llama 2's GGUFs have them) in tests/fixtures/tokenizer/spm_llama_vocab.json,
writes the same vocabulary into a metadata-only GGUF (arch llama) in a temp
dir, and records what transformers' GGUF loader gives for every corpus entry
in expected_spm_llama.json (the doppler test builds its GGUF from the JSON).
It also counts how often the sentencepiece library itself agrees.

    python tools/reference/spm_tokenizer_reference.py
venv: as tokenizer_reference.py (sentencepiece, gguf, transformers).
"""
import json
import os
import sys
import tempfile

import gguf
import numpy as np
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "tests", "fixtures", "tokenizer")


def main():
    lines = json.load(open(os.path.join(FIX, "corpus.json"), encoding="utf-8"))["lines"]
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "train.txt"), "w", encoding="utf-8") as f:
        for ln in lines[: len(lines) // 2]:
            f.write(ln.replace("\n", " ") + "\n")
    spm.SentencePieceTrainer.train(input=os.path.join(tmp, "train.txt"), model_prefix=os.path.join(tmp, "m"),
                                   vocab_size=1000, model_type="bpe", byte_fallback=True, character_coverage=0.9995,
                                   add_dummy_prefix=True, user_defined_symbols=["<|user|>"], minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "m.model"))
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        pieces.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        elif pieces[-1] == "<|user|>":
            types.append(4)
        else:
            types.append(1)
    vocab = {"tokens": pieces, "scores": scores, "token_type": types, "bos_token_id": sp.bos_id(),
             "eos_token_id": sp.eos_id(), "unknown_token_id": sp.unk_id(), "add_space_prefix": True,
             "add_bos_token": True}
    with open(os.path.join(FIX, "spm_llama_vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
        f.write("\n")

    path = os.path.join(tmp, "spm-llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(16)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.add_tensor("token_embd.weight", np.zeros((len(pieces), 16), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tmp, gguf_file="spm-llama.gguf")
    tok_split = AutoTokenizer.from_pretrained(tmp, gguf_file="spm-llama.gguf", split_special_tokens=True)
    special, plain, decoded, agree = [], {}, {}, 0
    for i, s in enumerate(lines):
        ids = tok.encode(s, add_special_tokens=True)
        special.append(ids)
        p = tok_split.encode(s, add_special_tokens=True)
        if p != ids:
            plain[str(i)] = p
        agree += ids[1:] == sp.encode(s)
        d = tok.decode(ids[1:], skip_special_tokens=False)
        if d != s:
            decoded[str(i)] = d
    out = {"tokenizer": "spm_llama", "source": "transformers AutoTokenizer from a GGUF of spm_llama_vocab.json",
           "add_bos": True, "n_lines": len(lines), "special": special, "plain": plain, "decoded": decoded}
    with open(os.path.join(FIX, "expected_spm_llama.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"spm_llama: {len(pieces)} pieces, {sum(map(len, special))} tokens, {len(decoded)} decode differently, "
          f"sentencepiece agrees on {agree}/{len(lines)}", file=sys.stderr)


if __name__ == "__main__":
    main()

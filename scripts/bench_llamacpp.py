#!/usr/bin/env python3
"""Times llama.cpp (through llama-cpp-python) the way `doppler bench inference`
times doppler: prefill of an N-token prompt from an empty cache, then greedy
decode of G tokens, medians over R repetitions after one warm-up.

Used by scripts/bench-vs-llamacpp; prints one JSON object per test:
{"engine": "llama.cpp", "model": ..., "prompt": N, "prefill_tps": ..., "decode_tps": ...}
The prompt tokens are BOS (when the model adds one) followed by the token ids
given with --tokens-from (a file written by the caller from doppler's
tokenizer), or token 1000.. cycled when absent, so both engines see the same ids.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, action="append", required=True)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens-from", help="file of whitespace-separated token ids to cycle")
    args = ap.parse_args()

    import llama_cpp  # noqa: E402  (the venv of scripts/bench-vs-llamacpp)

    n_ctx = max(args.prompt) + args.gen + 16
    # n_batch = n_ctx keeps llama-cpp-python's logits rows in range; the
    # physical batch (n_ubatch) is 512 as in llama-bench and doppler
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, verbose=False)
    filler = list(range(1000, 1400))
    if args.tokens_from:
        with open(args.tokens_from) as f:
            filler = [int(t) for t in f.read().split()]
    bos = llm.token_bos()
    add_bos = llm._model.add_bos_token() if hasattr(llm._model, "add_bos_token") else True

    def prompt_tokens(n):
        toks = [bos] if add_bos and bos >= 0 else []
        i = 0
        while len(toks) < n:
            toks.append(filler[i % len(filler)])
            i += 1
        return toks

    for n in args.prompt:
        toks = prompt_tokens(n)
        pre, dec = [], []
        for rep in range(args.reps + 1):
            llm.reset()
            llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
            t0 = time.perf_counter()
            llm.eval(toks)
            t1 = time.perf_counter()
            nxt = int(llm.scores[llm.n_tokens - 1].argmax())
            t2 = time.perf_counter()
            for _ in range(args.gen):
                llm.eval([nxt])
                nxt = int(llm.scores[llm.n_tokens - 1].argmax())
            t3 = time.perf_counter()
            if rep == 0:
                continue  # warm-up
            pre.append(n / (t1 - t0))
            dec.append(args.gen / (t3 - t2))
        print(json.dumps({"engine": "llama.cpp", "model": args.model, "prompt": n, "threads": args.threads,
                          "prefill_tps": statistics.median(pre), "prefill_range": [min(pre), max(pre)],
                          "decode_tps": statistics.median(dec), "decode_range": [min(dec), max(dec)],
                          "gen": args.gen, "reps": args.reps}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()

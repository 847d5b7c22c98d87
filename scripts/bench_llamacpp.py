#!/usr/bin/env python3
"""Helper of scripts/bench-vs-llamacpp (runs in its llama-cpp-python venv).

  bench_llamacpp.py time --model M --label L --prompt 64 --prompt 512 [--gen 32 --reps 3 --threads 2]
      Times llama.cpp the way `doppler bench inference` times doppler: per
      prompt size, one warm-up and then --reps repetitions of (prefill the
      prompt from an empty cache, then --gen greedy decode steps, each token
      fed back). Prompt: BOS (when the model adds one), then the tokens of the
      same filler text doppler's bench uses, cycled. One JSON line per prompt
      size with medians and ranges.

  bench_llamacpp.py table RESULTS.jsonl [--threads 2]
      The ratio table (markdown) from the JSON lines of both engines: the
      median over rounds of each engine's medians, doppler / llama.cpp.
"""
import argparse
import json
import statistics
import sys
import time

# The filler of `doppler bench inference` (tools/cmd_bench.c): Lewis Carroll,
# Alice's Adventures in Wonderland, 1865, public domain.
FILLER = (
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do: "
    "once or twice she had peeped into the book her sister was reading, but it had no pictures or conversations "
    "in it, \"and what is the use of a book,\" thought Alice \"without pictures or conversations?\" So she was "
    "considering in her own mind (as well as she could, for the hot day made her feel very sleepy and stupid), "
    "whether the pleasure of making a daisy-chain would be worth the trouble of getting up and picking the "
    "daisies, when suddenly a White Rabbit with pink eyes ran close by her. "
)


def cmd_time(args):
    import llama_cpp  # the venv of scripts/bench-vs-llamacpp

    n_ctx = max(args.prompt) + args.gen + 16
    # n_batch = n_ctx keeps llama-cpp-python's logits rows in range; the
    # physical batch (n_ubatch) is 512 as in llama-bench and doppler
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, verbose=False)
    filler = llm.tokenize(FILLER.encode(), add_bos=False, special=False)
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
        print(json.dumps({"engine": "llama.cpp", "label": args.label, "model": args.model, "threads": args.threads,
                          "prompt_tokens": n, "gen_tokens": args.gen, "reps": args.reps,
                          "prefill_tok_s": statistics.median(pre), "prefill_tok_s_min": min(pre),
                          "prefill_tok_s_max": max(pre), "decode_tok_s": statistics.median(dec),
                          "decode_tok_s_min": min(dec), "decode_tok_s_max": max(dec)}))
        sys.stdout.flush()


def cmd_table(args):
    rows = {}
    order = []
    with open(args.results) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            key = d["label"]
            if key not in rows:
                rows[key] = {}
                order.append(key)
            e = rows[key].setdefault(d["engine"], {})
            e.setdefault(("prefill", d["prompt_tokens"]), []).append(d["prefill_tok_s"])
            e.setdefault(("decode", d["prompt_tokens"]), []).append(d["decode_tok_s"])

    def med(e, k):
        v = e.get(k)
        return statistics.median(v) if v else None

    def cell(a, b):
        if a is None or b is None:
            return "-"
        return f"{a:.1f} / {b:.1f} = **{a / b:.2f}**"

    print(f"doppler / llama.cpp, tokens per second, {args.threads} threads (median over rounds)\n")
    print("| model | prefill 64 | prefill 512 | decode (after 64) |")
    print("|---|---|---|---|")
    for key in order:
        d, l = rows[key].get("doppler", {}), rows[key].get("llama.cpp", {})
        print(f"| {key} | {cell(med(d, ('prefill', 64)), med(l, ('prefill', 64)))} | "
              f"{cell(med(d, ('prefill', 512)), med(l, ('prefill', 512)))} | "
              f"{cell(med(d, ('decode', 64)), med(l, ('decode', 64)))} |")
    rounds = {k: len(v.get("doppler", {}).get(("prefill", 64), [])) for k, v in rows.items()}
    print(f"\nrounds per model: {rounds}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("time")
    t.add_argument("--model", required=True)
    t.add_argument("--label", default="")
    t.add_argument("--prompt", type=int, action="append", required=True)
    t.add_argument("--gen", type=int, default=32)
    t.add_argument("--reps", type=int, default=3)
    t.add_argument("--threads", type=int, default=2)
    b = sub.add_parser("table")
    b.add_argument("results")
    b.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cmd_time(args) if args.cmd == "time" else cmd_table(args)


if __name__ == "__main__":
    main()

"""load_client.py's workload (../shared/tools/load_client.py) spread over several processes.

At tens of thousands of streamed tokens a second one Python process (one core under the GIL) parsing every
SSE chunk falls behind the server: its clients then read late and send their next request late, and the
measured rate is the client's. This runs the same clients (client i's request r: a prompt of P words drawn
as load_client.py draws them, max_tokens G, temperature 0, ignore_eos, streaming) in PROCS processes started
together, and prints the same JSON line (plus "procs") over all of them. The prompts are seeded i * 1000 + r + 500
where load_client.py's are seeded i * 1000 + r: a run right after load_client.py's on the same server does not
find its prompts in the prefix cache (runs at growing N repeat their smaller N's prompts, as load_client.py's do).
LOAD_EXTRA (environment): a JSON object whose members are added to every request body, e.g. a response_format
with temperature and top_p for constrained answers (which may end before G tokens: the rate counts what came).
Usage: python load_procs.py HOST:PORT N [R=2] [P=100] [G=128] [PROCS=4]"""
import json
import multiprocessing as mp
import os
import random
import sys
import threading
import time
import http.client

EXTRA = json.loads(os.environ.get("LOAD_EXTRA") or "{}")

WORDS = "the of and a to in is you that it he was for on are as with his they at be this have from".split()


def one(addr, i, r, P, G, acc):
    host, port = addr
    rnd = random.Random(i * 1000 + r + 500)
    body = json.dumps({"model": "m", "prompt": " ".join(rnd.choice(WORDS) for _ in range(P)), "max_tokens": G,
                       "temperature": 0, "stream": True, "ignore_eos": True, **EXTRA})
    c = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.time()
    last = first = None
    n = 0
    gaps = []
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = c.getresponse()
    if resp.status != 200:
        acc["errors"].append(resp.status)
        return
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        d = line[5:].strip()
        if d == b"[DONE]":
            break
        try:
            ch = json.loads(d)
        except ValueError:
            continue
        if not ch.get("choices") or not ch["choices"][0].get("text"):
            continue
        now = time.time()
        n += 1
        if last is None:
            first = now - t0
        else:
            gaps.append(now - last)
        last = now
    c.close()
    with acc["lock"]:
        acc["ntok"] += n
        acc["itl"].extend(gaps)
        if first is not None:
            acc["ttft"].append(first)


def proc_main(addr, ids, R, P, G, start, q):
    acc = {"lock": threading.Lock(), "ntok": 0, "itl": [], "ttft": [], "errors": []}

    def worker(i):
        for r in range(R):
            one(addr, i, r, P, G, acc)

    th = [threading.Thread(target=worker, args=(i,)) for i in ids]
    start.wait()
    [t.start() for t in th]
    [t.join() for t in th]
    del acc["lock"]
    acc["end"] = time.time()
    q.put(acc)


def pct(a, q):
    a = sorted(a)
    return a[min(len(a) - 1, int(q * len(a)))] if a else None


def main():
    host, port = sys.argv[1].split(":")
    N = int(sys.argv[2])
    R = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    P = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    G = int(sys.argv[5]) if len(sys.argv) > 5 else 128
    K = max(1, min(N, int(sys.argv[6]) if len(sys.argv) > 6 else 4))
    start, q = mp.Barrier(K + 1), mp.Queue()
    ps = [mp.Process(target=proc_main, args=((host, int(port)), list(range(k, N, K)), R, P, G, start, q))
          for k in range(K)]
    [p.start() for p in ps]
    start.wait()
    t0 = time.time()
    res = [q.get() for _ in ps]
    [p.join() for p in ps]
    T = max(a["end"] for a in res) - t0
    ntok = sum(a["ntok"] for a in res)
    ttft = [x for a in res for x in a["ttft"]]
    itl = [x for a in res for x in a["itl"]]
    errs = sum(len(a["errors"]) for a in res)
    print(json.dumps({"clients": N, "procs": K, "requests": N * R, "errors": errs, "gen_tokens": ntok,
                      "seconds": round(T, 2), "agg_tok_s": round(ntok / T, 1),
                      "ttft_mean_ms": round(1e3 * sum(ttft) / max(1, len(ttft)), 1),
                      "ttft_p99_ms": round(1e3 * (pct(ttft, .99) or 0), 1),
                      "itl_mean_ms": round(1e3 * sum(itl) / max(1, len(itl)), 2),
                      "itl_p99_ms": round(1e3 * (pct(itl, .99) or 0), 2)}))


if __name__ == "__main__":
    main()

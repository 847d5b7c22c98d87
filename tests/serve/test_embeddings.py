"""doppler serve's POST /v1/embeddings (OpenAI's endpoint).

The reference is independent of doppler: the HF transformers traces in tests/fixtures/traces/ hold, in their
`final_norm` entries, transformers' last hidden state (float32, on the same GGUF's weights) at every position of
the trace's tokens. A causal model's row p is the same whatever follows it, so an input of the trace's first k
tokens has, pooled last, HF's row k - 1; pooled mean, the mean of rows 0..k-1; pooled cls, row 0; each
L2-normalised. Every fixture model whose trace is there is checked so under each pooling (the file's default, which
is last for these chat models, and --pooling mean / cls), with prefixes drawn fresh each run (the seed is printed;
DOPPLER_TEST_SEED repeats a run), within rel-L2 1e-3 (`doppler trace compare`'s tolerance), also when the input is
cut into chunks (--batch below its length). A copy of a fixture given <arch>.pooling_type in its file shows the
file's pooling is used, --pooling overrides it, and a reranker's (rank) is refused.

On Gemma 3: the real openai client's embeddings.create (base64 by default, and "float") equals the raw HTTP
result; several inputs in one request equal each sent alone; a text equals the ids /tokenize gives for it with
add_special; `dimensions` is the normalised head of the vector; 2048 inputs (the limit) answer in order; an input
of the whole context fits and one token more is a 400 naming the input; embeddings run while a greedy streamed chat
completion is in flight and both are what they are alone; a hang-up frees the sequences; a shutdown fails a running
embedding with 503; /metrics counts the route; every malformed body is a 400 naming its field."""
import base64
import http.client
import json
import math
import os
import random
import signal
import socket
import struct
import tempfile
import threading
import time

import openai

import serverlib
from serverlib import FIXTURES, GEMMA, MODELS, SLOW, Server, check, done, metric, need_model, post, request

TRACES = os.path.join(serverlib.ROOT, "tests", "fixtures", "traces")
TOL = 1e-3  # rel-L2, doppler trace compare's
MAX_INPUTS = 2048

# (trace, model, the shortest prefix whose rows are HF's: phi3's LongRoPE takes its long factors only in a pass
# past the original context of 24, as HF's one pass over the 40 tokens did)
CASES = [("qwen3-tiny.trace", os.path.join(FIXTURES, "qwen3-tiny.gguf"), 1),
         ("gemma2-tiny.trace", os.path.join(FIXTURES, "gemma2-tiny.gguf"), 1),
         ("phi3-tiny.trace", os.path.join(FIXTURES, "phi3-tiny.gguf"), 25),
         ("smollm3-tiny.trace", os.path.join(FIXTURES, "smollm3-tiny.gguf"), 1),
         ("mistral-tiny.trace", os.path.join(FIXTURES, "mistral-tiny.gguf"), 1),
         ("gemma-3-270m.sky.trace", GEMMA, 1),
         ("smollm2-135m.sky.trace", os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf"), 1)]

WORDS = ["the", "sky", "is", "blue", "because", "of", "Rayleigh", "scattering", "embedding", "vector", "river",
         "Hello", "world", "日本語", "Привет", "naïve café", "🤗", "def f(x):", "{\"k\": [1, 2]}", "\n", "  ", "3.14",
         "<start_of_turn>", "<end_of_turn>", "<bos>"]


class Failed(Exception):
    pass


# ------------------------------------------------------------------------------------------------ helpers

def read_trace(path):
    """The trace's tokens and its final_norm rows (rows[p]: position p)."""
    with open(path, "rb") as f:
        data = f.read()
    nl = data.index(b"\n")
    h = json.loads(data[:nl])
    toks = h["tokens"]
    rows = [None] * len(toks)
    for e in h["entries"]:
        if e["point"] != "final_norm":
            continue
        d, p0, n = e["dim"], e["pos0"], e["n_pos"]
        vals = struct.unpack_from(f"<{n * d}f", data, h["data_offset"] + e["offset"])
        for p in range(n):
            rows[p0 + p] = vals[p * d:(p + 1) * d]
    if any(r is None for r in rows):
        return None, None
    return toks, rows


def unit(v):
    s = math.sqrt(sum(x * x for x in v))
    return [x / s for x in v] if s > 0 else list(v)


def rel_l2(a, b):
    if len(a) != len(b):
        return float("inf")
    d = sum((x - y) ** 2 for x, y in zip(a, b))
    r = sum(y * y for y in b)
    return math.sqrt(d / (r if r > 0 else 1))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def from_b64(s):
    raw = base64.b64decode(s)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def embed(port, inputs, **kw):
    """A raw request: (status, body)."""
    return post(port, "/v1/embeddings", dict(kw, input=inputs))


def vectors(port, inputs, what, **kw):
    """The embeddings of a good request, in input order (base64 decoded), with its usage; checks the shape."""
    status, r = embed(port, inputs, **kw)
    if not check(status == 200 and isinstance(r, dict), f"{what}: {status} {str(r)[:400]}"):
        raise Failed()
    n = len(inputs) if isinstance(inputs, list) and inputs and not isinstance(inputs[0], int) else 1
    data = r.get("data")
    ok = r.get("object") == "list" and isinstance(data, list) and len(data) == n and isinstance(r.get("model"), str)
    ok = ok and all(d.get("object") == "embedding" and d.get("index") == i for i, d in enumerate(data))
    if not check(ok, f"{what}: the answer's shape: {str(r)[:400]}"):
        raise Failed()
    b64 = kw.get("encoding_format") == "base64"
    bad = [d["embedding"] for d in data if not (isinstance(d["embedding"], str) if b64 else isinstance(
        d["embedding"], list) and all(isinstance(x, (int, float)) for x in d["embedding"]))]
    if not check(not bad, f"{what}: an embedding of the wrong form: {str(bad[:1])[:100]}"):
        raise Failed()
    out = [from_b64(d["embedding"]) if b64 else [float(x) for x in d["embedding"]] for d in data]
    norms = [math.sqrt(sum(x * x for x in v)) for v in out]
    check(all(abs(x - 1) < 1e-5 for x in norms), f"{what}: not unit vectors: norms {norms[:8]}")
    u = r.get("usage") or {}
    check(u.get("prompt_tokens") == u.get("total_tokens") and isinstance(u.get("prompt_tokens"), int),
          f"{what}: usage {u}")
    return out, u.get("prompt_tokens")


def pooled(rows, k, pooling):
    if pooling == "cls":
        return unit(rows[0])
    if pooling == "mean":
        return unit([sum(r[j] for r in rows[:k]) / k for j in range(len(rows[0]))])
    return unit(rows[k - 1])


def run_part(fn, *args):
    try:
        fn(*args)
    except Failed:
        pass  # its check has failed and said why
    except RuntimeError as e:  # a server that did not start
        check(False, f"{fn.__name__}: {str(e)[-300:]}")


# ---------------------------------------------------------------------------------- against HF's rows

def t_trace_server(srv, toks, rows, pooling, lo, rng, name):
    port = srv.port
    n = len(toks)
    ks = [n] + [rng.randint(lo, n) for _ in range(3)]
    rng.shuffle(ks)
    inputs = [toks[:k] for k in ks]
    got, used = vectors(port, inputs, f"{name} {pooling} prefixes {ks}")
    check(used == sum(ks), f"{name}: usage {used}, the inputs hold {sum(ks)}")
    worst = 0
    for k, v in zip(ks, got):
        r = rel_l2(v, pooled(rows, k, pooling))
        worst = max(worst, r)
        check(r <= TOL, f"{name} {pooling}: the first {k} tokens: rel-L2 {r:.3g} against HF's rows (limit {TOL})")
    # base64: the same float32 values, bit for bit
    b64, _ = vectors(port, inputs, f"{name} {pooling} base64", encoding_format="base64")
    check(b64 == [[f32(x) for x in v] for v in got], f"{name} {pooling}: base64 differs from the floats")
    # one input as a bare list of ids is the same as the list of that list
    one, _ = vectors(port, inputs[0], f"{name} {pooling} one list")
    check(one == got[:1], f"{name} {pooling}: a bare list of ids differs from the same list nested")
    print(f"  {name} {pooling}: prefixes {ks}, worst rel-L2 {worst:.3g}", flush=True)


def t_traces(rng):
    for trace, model, lo in CASES:
        if not os.path.exists(model):
            print(f"  SKIP {trace}: {model} is absent", flush=True)
            continue
        toks, rows = read_trace(os.path.join(TRACES, trace))
        if not check(toks is not None, f"{trace}: final_norm does not cover every position"):
            continue
        for pooling in ("last", "mean", "cls"):
            run_part(t_trace_pooling, trace, model, toks, rows, pooling, lo, rng)


def t_trace_pooling(trace, model, toks, rows, pooling, lo, rng):
    # last: the file says nothing (a chat model), so the server pools the last position by default
    args = ["--parallel", "2", "--ctx", "128"] + ([] if pooling == "last" else ["--pooling", pooling])
    with Server(*args, model=model) as srv:
        run_part(t_trace_server, srv, toks, rows, pooling, lo, rng, trace)
        srv.stop()


def t_chunked(rng):
    """An input longer than a step's room is cut into chunks (24 tokens at --batch 17: 16 + 8), beside a second
    input, and pools the same rows."""
    toks, rows = read_trace(os.path.join(TRACES, "gemma2-tiny.trace"))
    for pooling in ("mean", "last", "cls"):
        with Server("--parallel", "1", "--batch", "17", "--ctx", "64", "--pooling", pooling,
                    model=os.path.join(FIXTURES, "gemma2-tiny.gguf")) as srv:
            k = rng.randint(17, len(toks))
            try:
                got, _ = vectors(srv.port, [toks, toks[:k]], f"chunked {pooling}")
                for kk, v in ((len(toks), got[0]), (k, got[1])):
                    r = rel_l2(v, pooled(rows, kk, pooling))
                    check(r <= TOL, f"chunked {pooling}: {kk} tokens: rel-L2 {r:.3g} against HF's rows")
            except Failed:
                pass
            srv.stop()


# ------------------------------------------------------------------------- the file's pooling_type

def gguf_with_pooling(src, dst, value):
    """A copy of the GGUF file src with <arch>.pooling_type = value (u32) added to its metadata."""
    with open(src, "rb") as f:
        data = f.read()
    if data[:4] != b"GGUF":
        raise RuntimeError(f"{src} is not GGUF")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    at = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(at):
        n, = struct.unpack_from("<Q", data, at)
        return data[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n

    def value_end(t, at):
        if t == 8:
            return string(at)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, at)
            at += 12
            if et in sizes:
                return at + sizes[et] * n
            for _ in range(n):
                at = value_end(et, at)
            return at
        return at + sizes[t]

    arch, alignment = None, 32
    for _ in range(n_kv):
        key, at = string(at)
        t, = struct.unpack_from("<I", data, at)
        at += 4
        if key == "general.architecture":
            arch = string(at)[0]
        if key == "general.alignment":
            alignment, = struct.unpack_from("<I", data, at)
        at = value_end(t, at)
    kv_end = at
    for _ in range(n_tensors):
        _, at = string(at)
        nd, = struct.unpack_from("<I", data, at)
        at += 4 + 8 * nd + 4 + 8
    infos_end = at
    data_start = (infos_end + alignment - 1) // alignment * alignment
    key = f"{arch}.pooling_type".encode()
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, value)
    head = data[:4] + struct.pack("<IQQ", version, n_tensors, n_kv + 1) + data[24:kv_end] + kv + \
        data[kv_end:infos_end]
    head += b"\0" * ((-len(head)) % alignment)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[data_start:])


def t_file_pooling(rng):
    model = os.path.join(FIXTURES, "qwen3-tiny.gguf")
    toks, rows = read_trace(os.path.join(TRACES, "qwen3-tiny.trace"))
    k = rng.randint(2, len(toks))
    with tempfile.TemporaryDirectory() as tmp:
        for value, name in ((1, "mean"), (2, "cls"), (3, "last"), (4, "rank")):
            path = os.path.join(tmp, f"qwen3-tiny-pooling{value}.gguf")
            gguf_with_pooling(model, path, value)
            over = rng.choice([p for p in ("mean", "cls", "last") if p != name])
            for args, want in (([], name), (["--pooling", over], over)):
                with Server("--parallel", "1", "--ctx", "64", *args, model=path) as srv:
                    what = f"pooling_type {value} ({name}) {' '.join(args)}"
                    if want == "rank":
                        status, r = embed(srv.port, [toks[:k]])
                        err = r.get("error", {}) if isinstance(r, dict) else {}
                        check(status == 400 and "rank" in str(err.get("message")),
                              f"{what}: a reranker's embedding is not refused: {status} {str(r)[:300]}")
                    else:
                        try:
                            got, _ = vectors(srv.port, [toks[:k]], what)
                            r = rel_l2(got[0], pooled(rows, k, want))
                            check(r <= TOL, f"{what}: {k} tokens pooled {want}: rel-L2 {r:.3g} against HF's rows")
                        except Failed:
                            pass
                    srv.stop()


# ------------------------------------------------------------------------------------- Gemma 3

def random_text(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))


def tokenize(port, text):
    status, r = post(port, "/tokenize", {"content": text, "add_special": True})
    if not check(status == 200, f"/tokenize {text!r}: {status} {r}"):
        raise Failed()
    return r["tokens"]


def n_vocab_and_id(port):
    status, _, data = request(port, "GET", "/v1/models")
    m = json.loads(data)["data"][0]
    return m["meta"]["n_vocab"], m["id"]


def t_client(srv, rng):
    """openai's embeddings.create against the raw answer; several inputs against each alone; texts against
    their ids; dimensions."""
    port = srv.port
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=300 * SLOW)
    vocab, model_id = n_vocab_and_id(port)
    texts = [random_text(rng) for _ in range(rng.randint(3, 7))]
    ids = [[rng.randrange(vocab) for _ in range(rng.randint(1, 40))] for _ in range(3)]
    raw, used = vectors(port, texts, "texts")
    status, r = embed(port, texts, model="whatever")
    check(status == 200 and r.get("model") == model_id, f"the answer's model: {r.get('model')}, the server's "
                                                        f"{model_id}")
    # the client: base64 asked for and decoded by default, or floats
    e = c.embeddings.create(model="x", input=texts)
    check([d.embedding for d in e.data] == [[f32(x) for x in v] for v in raw],
          "the client's default (base64) embeddings differ from the raw floats")
    check(e.usage.prompt_tokens == used and e.usage.total_tokens == used, f"the client's usage {e.usage}")
    e = c.embeddings.create(model="x", input=texts, encoding_format="float")
    check([d.embedding for d in e.data] == raw, "the client's float embeddings differ from the raw ones")
    e = c.embeddings.create(model="x", input=ids[0])
    check(len(e.data) == 1 and e.data[0].embedding == [f32(x) for x in vectors(port, [ids[0]], "ids")[0][0]],
          "the client's token-id input")
    # each input alone, texts and ids, against the one request (the CPU's kernels depend on the rows a
    # sequence has in a pass, which are the same: each short input is one chunk)
    worst = 0
    for inputs, together in ((texts, raw), (ids, vectors(port, ids, "ids")[0])):
        for x, v in zip(inputs, together):
            worst = max(worst, rel_l2(v, vectors(port, x, "an input alone")[0][0]))
    check(worst <= 1e-6, f"several inputs in one request against each alone: rel-L2 up to {worst:.3g}")
    print(f"  several inputs against each alone: worst rel-L2 {worst:.3g}", flush=True)
    # a text is its /tokenize ids with add_special (BOS, and special-token strings read as their tokens)
    for i, t in enumerate(texts):
        tid = tokenize(port, t)
        byid, n = vectors(port, [tid], "a text's ids")
        check(byid[0] == raw[i] and n == len(tid), f"{t!r}: its ids {tid[:20]} embed otherwise than the text")
    # dimensions: the first d values, normalised (a unit vector's head, renormalised)
    E = len(raw[0])
    for d in sorted({1, E, rng.randint(2, E - 1), rng.randint(2, E - 1)}):
        got, _ = vectors(port, texts, f"dimensions {d}", dimensions=d)
        worst = max(rel_l2(g, unit(v[:d])) for g, v in zip(got, raw))
        check(all(len(g) == d for g in got) and worst <= 1e-6, f"dimensions {d}: rel-L2 {worst:.3g}")
        e = c.embeddings.create(model="x", input=texts, dimensions=d)
        check([x.embedding for x in e.data] == [[f32(x) for x in g] for g in got], f"the client's dimensions {d}")


def t_limits(srv, rng, ctx):
    port = srv.port
    vocab, _ = n_vocab_and_id(port)
    whole = [rng.randrange(vocab) for _ in range(ctx)]
    got, n = vectors(port, [[5, 6], whole], "an input of the whole context")
    check(n == ctx + 2, f"usage {n}")
    status, r = embed(port, [[5, 6], whole + [7]])
    err = r.get("error", {}) if isinstance(r, dict) else {}
    check(status == 400 and err.get("param") == "input" and "input[1]" in str(err.get("message")),
          f"an input over the context: {status} {str(r)[:300]}")
    status, r = embed(port, "word " * (ctx + 5))
    check(status == 400 and "input" in str(r), f"a text over the context: {status} {str(r)[:300]}")


def t_many(rng):
    """The most inputs a request takes, on a tiny model: each in its place."""
    with Server("--parallel", "4", "--ctx", "64", model=os.path.join(FIXTURES, "qwen3-tiny.gguf")) as srv:
        vocab, _ = n_vocab_and_id(srv.port)
        inputs = [[rng.randrange(vocab) for _ in range(rng.randint(1, 12))] for _ in range(MAX_INPUTS)]
        try:
            got, n = vectors(srv.port, inputs, f"{MAX_INPUTS} inputs")
            check(n == sum(len(x) for x in inputs), f"{MAX_INPUTS} inputs: usage {n}")
            for i in rng.sample(range(MAX_INPUTS), 6):
                alone = vectors(srv.port, [inputs[i]], f"input {i} alone")[0][0]
                check(rel_l2(got[i], alone) <= 1e-6, f"{MAX_INPUTS} inputs: input {i} differs from it alone")
        except Failed:
            pass
        for body in ([[1]] * (MAX_INPUTS + 1), ["a"] * (MAX_INPUTS + 1)):
            status, r = embed(srv.port, body)
            check(status == 400 and r.get("error", {}).get("param") == "input",
                  f"{MAX_INPUTS + 1} inputs: {status} {str(r)[:200]}")
        srv.stop()


def t_beside_chat(srv, rng):
    """Embeddings while a greedy chat answer streams: both equal what they are alone."""
    port = srv.port
    body = {"model": "x", "messages": [{"role": "user", "content": "Tell me a long story about a river."}],
            "max_tokens": 200, "temperature": 0, "ignore_eos": True}
    alone_text = serverlib.stream_text(port, "/v1/chat/completions", body)[0]
    texts = [random_text(rng) for _ in range(5)]
    alone = [vectors(port, t, "alone")[0][0] for t in texts]
    first, result = threading.Event(), {}

    def chat():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300 * SLOW)
        c.request("POST", "/v1/chat/completions", body=json.dumps(dict(body, stream=True)),
                  headers={"Content-Type": "application/json"})
        text, fin = "", None
        for d in serverlib.sse_events(c.getresponse()):
            if d == "[DONE]":
                break
            ev = json.loads(d)
            for ch in ev.get("choices", []):
                text += ch["delta"].get("content") or ""
                fin = ch.get("finish_reason") or fin
                first.set()
        c.close()
        result.update(text=text, finish=fin)
        first.set()

    th = threading.Thread(target=chat)
    th.start()
    first.wait(120 * SLOW)
    rounds, overlapped = 0, 0
    worst = 0
    while rounds < 3 or (th.is_alive() and rounds < 50):
        got, _ = vectors(port, texts, "beside the chat")
        overlapped += th.is_alive()
        worst = max(worst, max(rel_l2(g, a) for g, a in zip(got, alone)))
        rounds += 1
    th.join(300 * SLOW)
    check(overlapped > 0, "no embedding request ran while the chat answer streamed")
    check(worst <= 1e-6, f"embeddings beside a chat answer differ from alone: rel-L2 {worst:.3g}")
    check(result.get("finish") == "length" and result.get("text") == alone_text,
          f"the chat answer beside embeddings: {result.get('finish')} {result.get('text', '')[:100]!r} vs alone "
          f"{alone_text[:100]!r}")
    print(f"  {overlapped} of {rounds} embedding requests ran beside the streamed chat answer", flush=True)


def big_body(rng, vocab, n_inputs, length):
    return json.dumps({"input": [[rng.randrange(vocab) for _ in range(length)] for _ in range(n_inputs)]})


def t_hangup(srv, rng):
    """A client that hangs up frees its sequences and its queue place within a step or so."""
    port = srv.port
    vocab, _ = n_vocab_and_id(port)
    body = big_body(rng, vocab, 400, 200)
    s = socket.create_connection(("127.0.0.1", port), timeout=30 * SLOW)
    s.sendall(f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body.encode())
    running = serverlib.wait_until(lambda: (metric(port, "doppler_running_sequences") or 0) > 0, 30)
    check(running, "the big embedding request never ran")
    s.close()
    t0 = time.time()
    idle = serverlib.wait_until(lambda: metric(port, "doppler_running_sequences") == 0 and
                                metric(port, "doppler_queue_length") == 0, 20)
    check(idle, f"after a hang-up: running {metric(port, 'doppler_running_sequences')}, queued "
                f"{metric(port, 'doppler_queue_length')}")
    print(f"  a hang-up freed the sequences in {time.time() - t0:.2f} s", flush=True)
    vectors(port, "still there", "after the hang-up")


def t_shutdown(rng):
    """SIGTERM with an embedding running past the grace: 503, and a clean exit."""
    with Server("--parallel", "2", "--ctx", "256", "--shutdown-timeout", "0.5") as srv:
        vocab, _ = n_vocab_and_id(srv.port)
        body = big_body(rng, vocab, 300, 200)
        result = {}

        def go():
            result["r"] = post(srv.port, "/v1/embeddings", body)

        th = threading.Thread(target=go)
        th.start()
        check(serverlib.wait_until(lambda: (metric(srv.port, "doppler_running_sequences") or 0) > 0, 30),
              "the embedding request never ran")
        srv.p.send_signal(signal.SIGTERM)
        th.join(60 * SLOW)
        status, r = result.get("r", (None, None))
        check(status == 503, f"an embedding cut by the shutdown: {status} {str(r)[:200]}")
        srv.stop()


def t_errors(srv):
    port = srv.port
    vocab, _ = n_vocab_and_id(port)
    E = len(vectors(port, "x", "one")[0][0])
    cases = [
        (b"not json", None), (b"", None), (b"[1]", None), (b'"text"', None), (b'{"input": "a\\u0000b"}', None),
        (b'{"input": "\xff\xfe"}', None),
        ({}, "input"), ({"input": None}, "input"), ({"input": 5}, "input"), ({"input": True}, "input"),
        ({"input": {"a": 1}}, "input"), ({"input": ""}, "input"), ({"input": []}, "input"),
        ({"input": [""]}, "input"), ({"input": ["a", ""]}, "input"), ({"input": [[]]}, "input"),
        ({"input": [[1], []]}, "input"), ({"input": [1, "a"]}, "input"), ({"input": ["a", 1]}, "input"),
        ({"input": [[1], 2]}, "input"), ({"input": [[1], ["a"]]}, "input"), ({"input": [[[1]]]}, "input"),
        ({"input": [1.5]}, "input"), ({"input": [-1]}, "input"), ({"input": [vocab]}, "input"),
        ({"input": [[1, vocab + 3]]}, "input"), ({"input": [2 ** 31]}, "input"), ({"input": [2 ** 64]}, "input"),
        ({"input": [1e300]}, "input"), ({"input": [True]}, "input"), ({"input": [None]}, "input"),
        ({"input": [[None]]}, "input"), ({"input": [{"a": 1}]}, "input"), ({"input": [["a"]]}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "encoding_format": ""}, "encoding_format"),
        ({"input": "a", "encoding_format": 1}, "encoding_format"),
        ({"input": "a", "encoding_format": "FLOAT"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"), ({"input": "a", "dimensions": -3}, "dimensions"),
        ({"input": "a", "dimensions": E + 1}, "dimensions"), ({"input": "a", "dimensions": 2.5}, "dimensions"),
        ({"input": "a", "dimensions": "8"}, "dimensions"), ({"input": "a", "dimensions": True}, "dimensions"),
        ({"input": "a", "dimensions": 1e300}, "dimensions"), ({"input": "a", "dimensions": [8]}, "dimensions"),
        ({"input": "a", "model": 5}, "model"), ({"input": "a", "model": ["m"]}, "model"),
    ]
    for body, param in cases:
        status, r = post(port, "/v1/embeddings", body)
        err = r.get("error") if isinstance(r, dict) else None
        ok = status == 400 and isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"]
        check(ok and err.get("param") == param and err.get("code") == 400 and "\n" not in err["message"],
              f"{body!r}: want 400 naming {param}, got {status} {str(r)[:300]}")
    # the bad input is named by its index
    for body, where in (({"input": ["a", "b", ""]}, "input[2]"), ({"input": [[1], [2, vocab]]}, "input[1][1]"),
                        ({"input": [3, -4]}, "input[1]")):
        status, r = post(port, "/v1/embeddings", body)
        check(status == 400 and where in str(r), f"{body}: the message does not name {where}: {str(r)[:300]}")
    # fields that change nothing: user, null for the optional ones, an integral dimensions written 8.0
    for extra in ({"user": "someone"}, {"user": 5}, {"encoding_format": None, "dimensions": None, "model": None},
                  {"dimensions": float(E)}):
        status, r = post(port, "/v1/embeddings", dict({"input": "a"}, **extra))
        check(status == 200, f"{extra}: {status} {str(r)[:200]}")
    status, _, _ = request(port, "GET", "/v1/embeddings")
    check(status == 405, f"GET /v1/embeddings: {status}")
    status, _, _ = request(port, "GET", "/health")
    check(status == 200, "the server does not answer after the malformed requests")


def t_metrics(srv):
    ok = metric(srv.port, 'doppler_requests_total{route="/v1/embeddings",status="200"}')
    bad = metric(srv.port, 'doppler_requests_total{route="/v1/embeddings",status="400"}')
    check(ok and ok > 0 and bad and bad > 0, f"/metrics: embeddings 200 {ok}, 400 {bad}")


def t_gemma(rng):
    ctx = 256
    with Server("--parallel", "4", "--ctx", str(ctx)) as srv:
        run_part(t_client, srv, rng)
        run_part(t_limits, srv, rng, ctx)
        run_part(t_beside_chat, srv, rng)
        run_part(t_hangup, srv, rng)
        run_part(t_errors, srv)
        run_part(t_metrics, srv)
        srv.stop()


def main():
    need_model()
    seed = int(os.environ.get("DOPPLER_TEST_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"seed {seed} (DOPPLER_TEST_SEED={seed} repeats this run)", flush=True)
    rng = random.Random(seed)
    t_traces(rng)
    run_part(t_chunked, rng)
    run_part(t_file_pooling, rng)
    run_part(t_many, rng)
    run_part(t_gemma, rng)
    run_part(t_shutdown, rng)
    done("serve embeddings")


if __name__ == "__main__":
    main()

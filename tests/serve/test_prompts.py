"""doppler serve's /v1/completions with several prompts (OpenAI's list of strings, or of token-id lists) through
the real openai client: each prompt's n choices are what a request of that prompt alone answers (greedy, and
seeded sampling: choice i of every prompt draws with seed + i), in OpenAI's order (index = prompt * n + choice),
streamed and not; usage sums over the prompts (each counted once whatever n); more prompts than --parallel wait
their turn as separate requests would; a hang-up frees every sequence and the queue place, a queued prompt's
failure (shutdown) fails the request at once; malformed lists and lists over the cap are 400 naming prompt."""
import http.client
import json
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai

import serverlib
from serverlib import FIXTURES, SLOW, Server, check, done, metric, need_model, post

HF = json.load(open(os.path.join(FIXTURES, "gemma-3-270m.json")))
PARALLEL = 4
TEXTS = [p["text"] for p in HF["prompts"][:3]]  # sky, a question, code
IDS = [p["ids"] for p in HF["prompts"][:3]]  # their token ids with BOS, as the server tokenizes the texts
MAX_CHOICES = 64  # prompts x n per request (request.h REQ_MAX_CHOICES)
N_VOCAB = 262144  # Gemma 3's
WORDS = "river stone cloud apple window garden silver paper music winter forest candle".split()


def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=300 * SLOW)


def port_of(c):
    return c.base_url.port


def parallel(fns):
    with ThreadPoolExecutor(len(fns)) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]


def lp_tokens(ch):
    """A choice as (text, its tokens, their log probabilities, finish reason)."""
    return ch.text, tuple(ch.logprobs.tokens), tuple(ch.logprobs.token_logprobs), ch.finish_reason


def same_sample(a, b):
    return (a[0], a[1], a[3]) == (b[0], b[1], b[3]) and all(abs(x - y) < 1e-4 for x, y in zip(a[2], b[2]))


def streamed(c, **kw):
    """A streamed completion through the client: text and finish reasons by index (every finish kept), the
    usage chunks."""
    text, finish, usage = {}, {}, []
    for ch in c.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage.append(ch.usage)
        for x in ch.choices:
            check(not finish.get(x.index), f"a chunk of choice {x.index} after its finish: {x}")
            text[x.index] = text.get(x.index, "") + x.text
            if x.finish_reason:
                finish.setdefault(x.index, []).append(x.finish_reason)
    return text, finish, usage


def check_whole_and_streamed(c, what, singles, n, **kw):
    """A request of the prompts in kw against singles[p] (prompt p alone, with the same n): each choice the
    single's choice of its index within the prompt, in index order, usage the sums, streamed as whole."""
    r = c.completions.create(n=n, **kw)
    total = len(singles) * n
    check([ch.index for ch in r.choices] == list(range(total)), f"{what}: indices {[ch.index for ch in r.choices]}")
    for k, ch in enumerate(r.choices):
        p, i = divmod(k, n)
        want = singles[p].choices[i]
        if ch.logprobs is not None:
            ok = same_sample(lp_tokens(ch), lp_tokens(want))
        else:
            ok = (ch.text, ch.finish_reason) == (want.text, want.finish_reason)
        check(ok, f"{what}: choice {k} (prompt {p}, choice {i}) {ch.text!r} {ch.finish_reason} != alone "
                  f"{want.text!r} {want.finish_reason}")
    u = r.usage
    want_prompt = sum(s.usage.prompt_tokens for s in singles)
    want_gen = sum(s.usage.completion_tokens for s in singles)
    check(u.prompt_tokens == want_prompt and u.completion_tokens == want_gen and
          u.total_tokens == want_prompt + want_gen, f"{what}: usage {u}, want {want_prompt} + {want_gen}")
    text, finish, usage = streamed(c, n=n, **kw)
    check(text == {ch.index: ch.text for ch in r.choices}, f"{what}: streamed {text} vs whole {r.choices}")
    check(finish == {ch.index: [ch.finish_reason] for ch in r.choices}, f"{what}: streamed finishes {finish}")
    check(len(usage) == 1 and usage[0].prompt_tokens == want_prompt and usage[0].completion_tokens == want_gen,
          f"{what}: streamed usage {usage}")
    return r


def t_greedy(c):
    """Strings and token-id lists, n = 1 and 2, temperature 0: each prompt's choices are its answer alone."""
    kw = dict(model="x", max_tokens=10, temperature=0)
    for name, prompts in (("strings", TEXTS), ("token ids", IDS)):
        for n in (1, 2):
            singles = parallel([lambda p=p: c.completions.create(prompt=p, n=n, **kw) for p in prompts])
            check(singles[0].choices[0].text and
                  HF["prompts"][0]["greedy"]["text"].startswith(singles[0].choices[0].text),
                  f"{name}: the sky prompt alone: {singles[0].choices[0].text!r}")
            check_whole_and_streamed(c, f"greedy {name} n={n}", singles, n, prompt=prompts, **kw)
    # the texts' ids give the texts' answers (the server adds BOS to a text, not to ids)
    r = c.completions.create(prompt=TEXTS, **kw)
    i = c.completions.create(prompt=IDS, **kw)
    check([x.text for x in r.choices] == [x.text for x in i.choices], f"texts {r.choices} vs their ids {i.choices}")


def t_seeded(c):
    """Seeded sampling: choice i of every prompt draws with seed + i, so each prompt's choices are the answer of
    that prompt alone with the same seed and n (on the CPU token for token)."""
    kw = dict(model="x", max_tokens=8, temperature=1.0, logprobs=1)
    seed = random.randrange(1, 1 << 31)
    for name, prompts in (("strings", TEXTS), ("token ids", IDS)):
        for n in (1, 2):
            singles = parallel([lambda p=p: c.completions.create(prompt=p, n=n, seed=seed, **kw) for p in prompts])
            r = check_whole_and_streamed(c, f"seed {seed} {name} n={n}", singles, n, prompt=prompts,
                                                seed=seed, **kw)
    # choice 1 of a later prompt is that prompt's n = 1 answer of seed + 1
    one = c.completions.create(prompt=IDS[2], seed=seed + 1, **kw)
    check(same_sample(lp_tokens(r.choices[2 * 2 + 1]), lp_tokens(one.choices[0])),
          f"seed {seed}: prompt 2 choice 1 {r.choices[5]} != its answer with seed + 1 {one.choices[0]}")


def t_stream_raw(c):
    """The stream of 3 prompts x 2 choices: one finish chunk per index, one usage chunk (last), one [DONE]."""
    body = dict(model="x", prompt=TEXTS, n=2, max_tokens=6, temperature=1.0, stream_options={"include_usage": True})
    chunks, done_lines, after = serverlib.sse_raw(port_of(c), "/v1/completions", dict(body, stream=True))
    finishes, usage = {}, []
    for ch in chunks:
        if ch.get("usage"):
            usage.append(ch["usage"])
        for x in ch["choices"]:
            if x["finish_reason"]:
                finishes[x["index"]] = finishes.get(x["index"], 0) + 1
    check(done_lines == 1 and after == 0, f"{done_lines} [DONE] lines, {after} chunks after")
    check(finishes == {k: 1 for k in range(6)}, f"finish chunks by index: {finishes}")
    check(len(usage) == 1 and chunks[-1].get("usage") == usage[0] and chunks[-1]["choices"] == [],
          f"usage chunks {usage}")
    ids = {ch["id"] for ch in chunks}
    check(len(ids) == 1, f"one id for the whole stream: {ids}")


def t_usage_cached(c):
    """Usage counts each prompt once (n = 2 too), and cached_tokens sums what each prompt's first choice took
    from the prefix cache; the metrics count a sequence per choice and one first token per request."""
    rng = random.Random()
    prompts = [" ".join(rng.choice(WORDS) for _ in range(100)) for _ in range(2)]  # fresh: nothing cached yet
    kw = dict(model="x", max_tokens=3, temperature=0)
    page = int(metric(port_of(c), "doppler_kv_page_size"))
    alone = [c.completions.create(prompt=p, **kw) for p in prompts]  # they compute the pages
    best = [(a.usage.prompt_tokens - 8) // page * page for a in alone]  # the scheduler leaves 8 rows or more
    names = ("doppler_requests_admitted_total", "doppler_prompt_tokens_cached_total",
             "doppler_time_to_first_token_seconds_count")
    before = [metric(port_of(c), k) for k in names]
    r = c.completions.create(prompt=prompts, n=2, **kw)
    after = [metric(port_of(c), k) for k in names]
    u = r.usage
    check(u.prompt_tokens == sum(a.usage.prompt_tokens for a in alone) and u.completion_tokens == 4 * 3,
          f"usage {u} vs alone {[a.usage for a in alone]}")
    check(min(best) >= 64 and u.prompt_tokens_details.cached_tokens == sum(best),
          f"cached_tokens {u.prompt_tokens_details.cached_tokens}, want {best}")
    delta = [b - a for a, b in zip(before, after)]
    check(delta == [4, 2 * sum(best), 1], f"metrics {names}: +{delta}, want [4, {2 * sum(best)}, 1]")
    check([x.text for x in r.choices] == [a.choices[0].text for a in alone for _ in range(2)],
          f"answers {r.choices} vs alone {alone}")


def t_many(c):
    """More prompts than --parallel (4): they wait their turn, a group of n after another, and each answer is
    still its own alone; 20 x 1 and 8 x 3 choices."""
    prompts = [f"Item {k}: the" for k in range(20)]
    kw = dict(model="x", max_tokens=4, temperature=0)
    singles = parallel([lambda p=p: c.completions.create(prompt=p, **kw).choices[0].text for p in prompts])
    r = c.completions.create(prompt=prompts, **kw)
    check([x.index for x in r.choices] == list(range(20)) and [x.text for x in r.choices] == singles,
          f"20 prompts on 4 sequences: {[x.text for x in r.choices]} vs alone {singles}")
    r = c.completions.create(prompt=prompts[:8], n=3, **kw)
    check([x.text for x in r.choices] == [s for s in singles[:8] for _ in range(3)],
          f"8 prompts x 3: {[x.text for x in r.choices]}")
    check(metric(port_of(c), "doppler_queue_length") == 0 and metric(port_of(c), "doppler_running_sequences") == 0,
          "something left in the queue or running")


def t_hangup(c):
    """A client that hangs up on a stream of 6 prompts (4 running, 2 waiting as the request's one queue place)
    frees the sequences and the queue."""
    port = port_of(c)
    s = serverlib.raw_socket(port)
    body = json.dumps(dict(model="x", prompt=["Once upon a time"] * 6, max_tokens=900, stream=True, ignore_eos=True))
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while got.count(b"data: ") < 12:
        more = s.recv(65536)
        got += more
        if not more or not got.startswith(b"HTTP/1.1 200"[:len(got)]):
            s.close()
            raise RuntimeError(f"the stream did not start: {got[:300]!r}")
    running, queued = metric(port, "doppler_running_sequences"), metric(port, "doppler_queue_length")
    s.close()
    check(running == PARALLEL and queued == 1, f"6 prompts, --parallel 4: {running} running, {queued} queued")
    gone = serverlib.wait_until(lambda: metric(port, "doppler_running_sequences") == 0 and
                                metric(port, "doppler_queue_length") == 0, 10)
    check(gone, f"after the hang-up: {metric(port, 'doppler_running_sequences')} running, "
                f"{metric(port, 'doppler_queue_length')} queued")
    r = c.completions.create(model="x", prompt=TEXTS, max_tokens=2, temperature=0)
    check(len(r.choices) == 3, f"the next request: {r}")


def bad(port, prompt, want_in=None, **extra):
    st, r = post(port, "/v1/completions", dict(model="x", prompt=prompt, max_tokens=2, **extra))
    err = r.get("error", {}) if isinstance(r, dict) else {}
    ok = st == 400 and err.get("param") == "prompt" and (want_in is None or want_in in err.get("message", ""))
    check(ok, f"prompt {str(prompt)[:80]} {extra}: {st} {r}")


def t_errors(c):
    """Malformed lists, lists over the cap and prompts beyond the vocabulary or the context: 400 naming prompt;
    n above --parallel stays 400 naming n."""
    port = port_of(c)
    for p in ([], ["a", 1], [1, "a"], [[1, 2], "a"], ["a", [1]], [[1], []], [[]], [[1, 2.5]], [[1], [-1]],
              [["a"]], [None], ["a", None], [{"x": 1}], [[1], [True]], [[1], [[2]]]):
        bad(port, p)
    bad(port, [[2, 818], [2, N_VOCAB]], "vocabulary")
    bad(port, ["hi"] * (MAX_CHOICES + 1), str(MAX_CHOICES))
    bad(port, ["hi"] * 33, str(MAX_CHOICES), n=2)  # 66 choices
    bad(port, ["hi", "word " * 2000], "context")
    st, r = post(port, "/v1/completions", dict(model="x", prompt=["hi", "word " * 500], max_tokens=600))
    check(st == 400 and r["error"]["param"] == "max_tokens", f"max_tokens beyond the second prompt's room: {st} {r}")
    st, r = post(port, "/v1/completions", dict(model="x", prompt=["hi", "yo"], n=PARALLEL + 1, max_tokens=2))
    check(st == 400 and r["error"]["param"] == "n", f"n above --parallel with two prompts: {st} {r}")
    try:
        c.completions.create(model="x", prompt=["a", [1, 2]], max_tokens=2)
        check(False, "a list mixing strings and ids accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "prompt", f"mixed list: {e}")
    r = c.completions.create(model="x", prompt=["hi"] * MAX_CHOICES, max_tokens=1, temperature=0)
    check(len(r.choices) == MAX_CHOICES, f"{MAX_CHOICES} prompts: {len(r.choices)} choices")


def t_shutdown():
    """SIGTERM while a request's later prompts wait: they get 503, which fails the request at once (the running
    prompts are cancelled, not waited for), whole or streamed; the server exits 0."""
    with Server("--parallel", "2", "--ctx", "1024", "--shutdown-timeout", "60") as srv:
        body = dict(model="x", prompt=["Once upon a time"] * 3, max_tokens=900, ignore_eos=True)
        res = {}

        def whole():
            res["whole"] = post(srv.port, "/v1/completions", body, timeout=120)

        t = threading.Thread(target=whole)
        t.start()
        check(serverlib.wait_until(lambda: metric(srv.port, "doppler_running_sequences") == 2, 30),
              "the first two prompts did not start")
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120 * SLOW)
        conn.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                     headers={"Content-Type": "application/json"})
        # the whole request's third prompt and the stream's request wait
        check(serverlib.wait_until(lambda: metric(srv.port, "doppler_queue_length") == 2, 30),
              f"queue: {metric(srv.port, 'doppler_queue_length')}")
        t0 = time.time()
        srv.p.send_signal(signal.SIGTERM)
        t.join(60 * SLOW)
        st, r = res.get("whole", (None, None))
        check(st == 503 and "shutting down" in str(r), f"the whole request after SIGTERM: {st} {r}")
        resp = conn.getresponse()
        if resp.status == 200:
            rest = list(serverlib.sse_events(resp))
            check(rest and rest[-1] == "[DONE]" and any("shutting down" in e for e in rest),
                  f"the stream after SIGTERM: {rest[-2:]}")
        else:
            check(resp.status == 503, f"the stream after SIGTERM: {resp.status}")
        check(time.time() - t0 < 30 * SLOW, f"the requests took {time.time() - t0:.1f} s to fail")
        srv.stop()


def main():
    need_model()
    with Server("--parallel", str(PARALLEL), "--ctx", "1024") as srv:
        c = client(srv)
        for t in (t_greedy, t_seeded, t_stream_raw, t_usage_cached, t_many, t_hangup, t_errors):
            t0 = time.time()
            try:
                t(c)
            except Exception as e:  # one test's exception fails it and the others still run
                check(False, f"{t.__name__} raised {e!r}")
            print(f"  {t.__name__}: {time.time() - t0:.1f} s", flush=True)
        srv.stop()
    t_shutdown()
    done("serve prompts")


if __name__ == "__main__":
    main()

"""doppler serve through the real openai client: completions and chat,
streaming and not, stop strings, max_tokens, seeds, log probabilities,
penalties, n choices; greedy output equals `doppler run` and HuggingFace's reference
(tests/fixtures/models/gemma-3-270m.json), log probabilities match HF's
logits; a model without a chat template; chat template variables; reasoning
apart from content; tools; the API key."""
import array
import json
import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

import serverlib
from serverlib import (FIXTURES, GEMMA, SLOW, Server, check, done, doppler_run, metric, need_model, request, skip)

HF = json.load(open(os.path.join(FIXTURES, "gemma-3-270m.json")))
SKY = HF["prompts"][0]
assert SKY["name"] == "sky"
LP_TOL = 0.05  # logprobs vs HF float32 (doppler's logits are within 1e-3 rel-L2 of HF's, tests/forward_ref.h)


def client(srv, key="unused"):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=key, max_retries=0, timeout=300 * SLOW)


def run_ref(*args):
    out = doppler_run("-m", GEMMA, *args)
    return out[:-1] if out.endswith("\n") else out  # run ends its output with a newline


def parallel(fns):
    """Runs independent requests at once (the server batches them) and
    returns their results in order."""
    with ThreadPoolExecutor(len(fns)) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]


def t_greedy(c):
    # HF's greedy continuation (an independent reference), with logprobs
    r = c.completions.create(model="x", prompt=SKY["text"], max_tokens=32, temperature=0, logprobs=5)
    ch = r.choices[0]
    check(ch.text == SKY["greedy"]["text"], f"greedy sky != HF: {ch.text!r} vs {SKY['greedy']['text']!r}")
    check(ch.finish_reason == "length" and r.usage.completion_tokens == 32 and r.usage.prompt_tokens == 7,
          f"finish/usage: {ch.finish_reason} {r.usage}")
    t_logprobs_hf(ch.logprobs, ch.text)
    # `doppler run` with the same prompt and settings
    prompts = ["Once upon a time, in a small village,", "Les meilleurs fromages de France sont"]
    q = "Name three colors."
    refs = [run_ref("-p", p, "-n", "12", "--temp", "0", "--no-echo") for p in prompts]
    refs.append(run_ref("--chat", "-p", q, "-n", "12", "--temp", "0"))
    # repeat penalty is the engine's own: same as run's
    refs.append(run_ref("-p", SKY["text"], "-n", "12", "--temp", "0", "--no-echo", "--repeat-penalty", "1.3"))
    got = parallel([lambda p=p: c.completions.create(model="x", prompt=p, max_tokens=12, temperature=0)
                    .choices[0].text for p in prompts] +
                   [lambda: c.chat.completions.create(model="x", messages=[{"role": "user", "content": q}],
                                                      max_tokens=12, temperature=0).choices[0].message.content,
                    lambda: c.completions.create(model="x", prompt=SKY["text"], max_tokens=12, temperature=0,
                                                 extra_body={"repeat_penalty": 1.3}).choices[0].text])
    for what, g, ref in zip(prompts + ["chat: " + q, "repeat_penalty 1.3"], got, refs):
        check(g == ref, f"server != doppler run for {what!r}: {g!r} vs {ref!r}")


def t_stream(c):
    def completion(stream):
        if not stream:
            return c.completions.create(model="x", prompt=SKY["text"], max_tokens=8, temperature=0)
        parts, finish, usage = [], None, None
        for ch in c.completions.create(model="x", prompt=SKY["text"], max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True}):
            if ch.usage:
                usage = ch.usage
            for x in ch.choices:
                parts.append(x.text)
                finish = x.finish_reason or finish
        return parts, finish, usage

    msgs = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a fruit."}]

    def chat(stream):
        if not stream:
            return c.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0)
        text, roles, finish = "", [], None
        for ch in c.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0, stream=True):
            for x in ch.choices:
                text += x.delta.content or ""
                roles.append(x.delta.role)
                finish = x.finish_reason or finish
        return text, roles, finish

    whole, (parts, finish, usage), cwhole, (text, roles, cfinish) = parallel(
        [lambda: completion(False), lambda: completion(True), lambda: chat(False), lambda: chat(True)])
    check("".join(parts) == whole.choices[0].text, f"stream {''.join(parts)!r} != {whole.choices[0].text!r}")
    check(len([p for p in parts if p]) == 8, f"one chunk per token expected: {parts}")
    check(finish == "length", f"stream finish_reason {finish}")
    check(usage is not None and usage.completion_tokens == 8 and usage.prompt_tokens == 7, f"stream usage {usage}")
    check(text == cwhole.choices[0].message.content, f"chat stream {text!r} != {cwhole.choices[0].message.content!r}")
    check(roles and roles[0] == "assistant", f"first chunk's role {roles[:1]}")
    check(cfinish == cwhole.choices[0].finish_reason, f"chat stream finish {cfinish}")


def t_stop(c):
    full = SKY["greedy"]["text"]  # ' a beautiful thing. It is a symbol of hope and a reminder ...'
    first14 = c.completions.create(model="x", prompt=SKY["text"], max_tokens=14, temperature=0).choices[0].text
    check(full.startswith(first14), "14 greedy tokens are not a prefix of HF's 32")
    cases = [("symbol", full[:full.index("symbol")], "stop"),
             ([" of hope", "zzz"], full[:full.index(" of hope")], "stop"),   # spans two tokens
             (["symbol of despair"], first14, "length"),                     # starts to match, never does
             ("thing. It", full[:full.index("thing. It")], "stop")]

    def whole(stop):
        r = c.completions.create(model="x", prompt=SKY["text"], max_tokens=14, temperature=0, stop=stop)
        return r.choices[0].text, r.choices[0].finish_reason

    def streamed(stop):
        text, finish = "", None
        for ch in c.completions.create(model="x", prompt=SKY["text"], max_tokens=14, temperature=0, stop=stop,
                                       stream=True):
            for x in ch.choices:
                text += x.text
                finish = x.finish_reason or finish
        return text, finish

    got = parallel([lambda s=stop, f=f: f(s) for stop, _, _ in cases for f in (whole, streamed)])
    for i, (stop, want, why) in enumerate(cases):
        for j, how in enumerate(("whole", "streamed")):
            check(got[2 * i + j] == (want, why), f"{how} stop {stop!r}: {got[2 * i + j]} vs {(want, why)}")


def t_max_tokens(c):
    for n in (1, 5):
        r = c.completions.create(model="x", prompt=SKY["text"], max_tokens=n, temperature=0)
        check(r.usage.completion_tokens == n and r.choices[0].finish_reason == "length", f"max_tokens {n}: {r.usage}")
    r = c.completions.create(model="x", prompt=SKY["text"], temperature=0)
    check(r.usage.completion_tokens == 16, f"default max_tokens of /v1/completions is 16: {r.usage}")
    try:
        c.completions.create(model="x", prompt=SKY["text"], max_tokens=5000)
        check(False, "max_tokens beyond the context was accepted")
    except openai.BadRequestError as e:
        check("7" in str(e) and "5000" in str(e) and "1024" in str(e), f"context error names the numbers: {e}")


def t_seed(c):
    kw = dict(model="x", prompt="My favourite animal is", max_tokens=8, temperature=1.0)
    a, b, s, *others = parallel(
        [lambda: c.completions.create(seed=1234, **kw).choices[0].text,
         lambda: c.completions.create(seed=1234, **kw).choices[0].text,
         lambda: "".join(x.choices[0].text for x in c.completions.create(seed=1234, stream=True, **kw) if x.choices)] +
        [lambda k=k: c.completions.create(seed=k, **kw).choices[0].text for k in (1, 2, 3)])
    check(a == b == s, f"same seed, different text: {a!r} {b!r} {s!r}")
    check(len(set(others) | {a}) > 1, f"four seeds gave one text: {others}")


def read_f32(path, n):
    a = array.array("f")
    with open(path, "rb") as f:
        a.fromfile(f, n)
    return a


def t_logprobs_hf(lp, text):
    """The sky prompt's 32 greedy steps with 5 logprobs each, against HF."""
    check("".join(lp.tokens) == text, "logprob tokens do not join to the text")
    check(lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0, f"text_offset {lp.text_offset}")
    for i, (tok, l, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        check(l <= 0 and abs(l - max(top.values())) < 1e-5, f"step {i}: greedy token {tok!r} {l} not the top {top}")
    # step 0 against HF's full logits: log-softmax of the reference
    V = 262144
    ref = read_f32(os.path.join(FIXTURES, SKY["logits_file"]), V)
    mx = max(ref)
    lse = mx + math.log(sum(math.exp(x - mx) for x in ref))
    want = sorted((x - lse for x in ref), reverse=True)[:5]
    got = sorted(lp.top_logprobs[0].values(), reverse=True)
    check(len(got) == 5 and all(abs(a - b) < LP_TOL for a, b in zip(got, want)),
          f"step 0 top-5 logprobs {got} vs HF {want}")
    # every step: the top-5's differences to the best (the normaliser cancels) against HF's logits
    worst = 0
    for i, top in enumerate(SKY["greedy"]["steps_top"][:32]):
        ref_d = [t[1] - top[0][1] for t in top]
        got_v = sorted(lp.top_logprobs[i].values(), reverse=True)
        got_d = [v - got_v[0] for v in got_v]
        worst = max([worst] + [abs(a - b) for a, b in zip(got_d, ref_d)])
    check(worst < LP_TOL, f"top-5 logprob gaps differ from HF's logits by {worst:.4f}")


def t_logprobs(c):
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Say something nice."}],
                                  max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    check(len(content) == r.usage.completion_tokens - (r.choices[0].finish_reason == "stop"),
          f"{len(content)} logprob entries for {r.usage.completion_tokens} tokens")
    check("".join(e.token for e in content) == r.choices[0].message.content, "chat logprob tokens != content")
    for e in content:
        check(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and
              abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and e.logprob <= 0, f"chat logprob entry {e}")
        check(bytes(e.bytes).decode("utf-8", "replace") == e.token, f"bytes of {e.token!r}: {e.bytes}")


def t_penalties(c):
    """Presence/frequency penalties: each greedy pick is the best of the
    penalised top-20 (raw logprobs minus presence + frequency x count)."""
    pres, freq = 0.4, 1.2
    r = c.completions.create(model="x", prompt=SKY["text"], max_tokens=20, temperature=0, logprobs=20,
                             presence_penalty=pres, frequency_penalty=freq)
    lp = r.choices[0].logprobs
    counts, bad = {}, []
    for i, (tok, l, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        pen = lambda t: (pres + freq * counts[t]) if counts.get(t) else 0.0
        best = max(v - pen(t) for t, v in top.items())
        if l - pen(tok) < best - 1e-4:
            bad.append((i, tok, l - pen(tok), best))
        counts[tok] = counts.get(tok, 0) + 1
    check(not bad, f"penalised greedy picks that are not the best: {bad[:3]}")
    check(not SKY["greedy"]["text"].startswith(r.choices[0].text), "penalties changed nothing")


def t_logit_bias(c):
    """logit_bias against HF's top-20 at the sky prompt: banning HF's first choice (-100) gives its second,
    banning both its third; +100 on that one repeats it."""
    top = [t for t, _ in SKY["top20"][:3]]

    def first(bias, n=1):
        return c.completions.create(model="x", prompt=SKY["text"], max_tokens=n, temperature=0,
                                    logit_bias=bias).choices[0].text

    def ids(text):
        out = subprocess.run([serverlib.BIN, "tokenize", "-m", GEMMA, "--ids", "--no-bos", text],
                             capture_output=True, timeout=60)
        return [int(t) for t in out.stdout.split()]
    second, third = first({str(top[0]): -100}), first({str(top[0]): -100, str(top[1]): -100})
    check(ids(second) == [top[1]] and ids(third) == [top[2]],
          f"banned HF's top picks: {second!r} {ids(second)} / {third!r} {ids(third)}, want {top[1:]}")
    boosted = first({str(top[2]): 100}, 4)
    check(boosted == third * 4, f"+100 on {top[2]}: {boosted!r}")
    try:
        first({"999999999": 5})
        check(False, "a logit_bias id beyond the vocabulary was accepted")
    except openai.BadRequestError as e:
        check("not a token id" in str(e), f"logit_bias beyond the vocabulary: {e}")


def t_prefix_cache(c):
    """A repeated system prompt is computed once: the second request takes
    its whole pages from the prefix cache (usage.prompt_tokens_details)."""
    system = ("You are a helpful assistant for a small bakery. You know the opening hours, the prices of bread, "
              "cakes and coffee, and you answer politely in one or two sentences. ") * 2
    cached = []
    for q in ("When do you open?", "How much is a croissant?"):
        r = c.chat.completions.create(model="x", max_tokens=2, temperature=0, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": q}])
        cached.append(r.usage.prompt_tokens_details.cached_tokens)
        prompt_tokens = r.usage.prompt_tokens
    check(cached[1] >= 64 and cached[1] % 16 == 0 and cached[1] < prompt_tokens,
          f"cached prompt tokens {cached} of {prompt_tokens}")


def t_errors(c):
    try:
        c.chat.completions.create(model="x", messages=[{"role": "function", "content": "hi", "name": "f"}])
        check(False, "role function accepted")
    except openai.BadRequestError as e:
        check("role" in str(e), f"role message: {e}")
    # a client's reasoning_content given back: a built-in template goes on without it
    r = c.chat.completions.create(model="x", max_tokens=2, temperature=0, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "reasoning_content": "greet"},
        {"role": "user", "content": "bye"}])
    check(r.usage.completion_tokens >= 1, f"reasoning_content through the built-in template: {r}")
    try:  # Gemma's built-in template has no tool messages
        c.chat.completions.create(model="x", messages=[{"role": "tool", "content": "hi", "tool_call_id": "c"}])
        check(False, "a tool message through a built-in template accepted")
    except openai.BadRequestError as e:
        check("need a Jinja chat template" in str(e), f"tool message, built-in template: {e}")
    # OpenAI fields that would change the answer and are not implemented: 400, not ignored
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    for extra, want in (({"tools": [tool]}, "tool calling needs a chat template that teaches a tool-call format"),
                        ({"response_format": {"type": "json_schema", "json_schema": {
                            "name": "x", "schema": {"type": "string", "format": "email"}}}},
                         "the schema keyword 'format' is not supported")):
        try:
            c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=2, **extra)
            check(False, f"{extra} accepted")
        except openai.BadRequestError as e:
            check(want in str(e), f"{extra}: {e}")
    m = c.models.list()
    check(len(m.data) == 1 and m.data[0].id == os.path.basename(GEMMA), f"models {m}")


def port_of(c):
    return c.base_url.port


def lp_tokens(ch):
    """A completion choice as (text, its tokens, their log probabilities, finish reason)."""
    return ch.text, tuple(ch.logprobs.tokens), tuple(ch.logprobs.token_logprobs), ch.finish_reason


def same_sample(a, b):
    """Two lp_tokens of one draw: the same text, tokens and finish; log probabilities to float noise."""
    return (a[0], a[1], a[3]) == (b[0], b[1], b[3]) and all(abs(x - y) < 1e-4 for x, y in zip(a[2], b[2]))


def t_n(c):
    """n choices, non-streamed: indices 0..n-1, each its own sample (choice i drawn with seed + i: choice i is the
    n=1 answer of that seed), reproducible; usage counts the prompt once and every choice's tokens. Without a
    seed the choices are independent draws too."""
    kw = dict(model="x", prompt="My favourite animal is", max_tokens=12, temperature=1.0, logprobs=1)
    differ = False
    for _ in range(3):  # an unlucky seed could make three short answers of a small model equal: a few seeds
        seed = random.randrange(1, 1 << 31)
        r, again, *ones = parallel([lambda: c.completions.create(n=3, seed=seed, **kw)] * 2 +
                                   [lambda i=i: c.completions.create(seed=seed + i, **kw) for i in range(3)])
        check([ch.index for ch in r.choices] == [0, 1, 2], f"seed {seed}: indices {[ch.index for ch in r.choices]}")
        got = [lp_tokens(ch) for ch in r.choices]
        check(len(again.choices) == 3 and all(same_sample(a, lp_tokens(b)) for a, b in zip(got, again.choices)),
              f"seed {seed}: n=3 twice differs: {got} vs {again}")
        for i, one in enumerate(ones):
            check(same_sample(got[i], lp_tokens(one.choices[0])),
                  f"seed {seed}: choice {i} {got[i]} != the n=1 answer of seed {seed + i}: {lp_tokens(one.choices[0])}")
        # an end token has no log probability entry; every other token has one
        gen = sum(len(toks) + (finish == "stop") for _, toks, _, finish in got)
        u, u1 = r.usage, ones[0].usage
        check(u.prompt_tokens == u1.prompt_tokens and u.completion_tokens == gen and
              u.total_tokens == u.prompt_tokens + gen, f"seed {seed}: usage {u} for {gen} tokens (n=1: {u1})")
        differ = len({toks for _, toks, _, _ in got}) > 1
        if differ:
            break
    check(differ, "three seeds in a row gave three equal choices at temperature 1")
    free = [tuple(lp_tokens(ch) for ch in c.completions.create(n=3, **kw).choices) for _ in range(3)]
    check(any(len(set(x)) > 1 for x in free), f"n=3 without a seed: the choices are all equal, three times: {free}")
    # greedy: n equal answers
    g = c.completions.create(model="x", prompt=SKY["text"], max_tokens=8, temperature=0, n=2)
    texts = [ch.text for ch in g.choices]
    check(len(texts) == 2 and texts[0] == texts[1] and texts[0] and SKY["greedy"]["text"].startswith(texts[0]),
          f"greedy n=2: {texts}")


def t_n_prompt_once(c):
    """A long prompt of n choices is computed once: the later choices wait for the first's pages (the prefix
    cache), and still draw what n=1 requests of their seeds draw."""
    rng = random.Random()
    words = "river stone cloud apple window garden silver paper music winter forest candle".split()
    prompt = " ".join(rng.choice(words) for _ in range(120))  # fresh text: no page of it is cached yet
    kw = dict(model="x", prompt=prompt, max_tokens=6, temperature=1.0)
    seed = rng.randrange(1, 1 << 31)
    page = metric(port_of(c), "doppler_kv_page_size")
    before = metric(port_of(c), "doppler_prompt_tokens_cached_total")
    r = c.completions.create(n=3, seed=seed, **kw)
    after = metric(port_of(c), "doppler_prompt_tokens_cached_total")
    n_prompt, lead = r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens
    best = (n_prompt - 8) // int(page) * int(page)  # the scheduler leaves 8 prompt rows or more to compute
    check(best >= 64 and after - before == lead + 2 * best,
          f"{n_prompt} prompt tokens: {after - before} taken from the cache, want {lead} + 2 x {best}")
    ones = parallel([lambda i=i: c.completions.create(seed=seed + i, **kw).choices[0].text for i in range(3)])
    check([ch.text for ch in r.choices] == ones, f"seed {seed}: long prompt, n=3 {r.choices} vs n=1 {ones}")


def t_n_stream(c):
    """n choices streamed: chunks of all choices on one stream, each naming its index; per index one role delta
    first and one finish chunk last, the deltas joined the non-streamed answer's choice; one usage chunk (the
    sums) and one [DONE] at the end. Completions through the openai client likewise."""
    seed = random.randrange(1, 1 << 31)
    body = dict(model="x", messages=[{"role": "user", "content": "Tell me about cats."}], max_tokens=10,
                temperature=1.0, seed=seed, n=3)
    whole = c.chat.completions.create(**body)
    chunks, done_lines, after = serverlib.sse_raw(port_of(c), "/v1/chat/completions",
                                                  dict(body, stream=True, stream_options={"include_usage": True}))
    check(done_lines == 1 and after == 0, f"seed {seed}: {done_lines} [DONE] lines, {after} chunks after")
    text, roles, finish, usage, order = {}, {}, {}, [], []
    for ch in chunks:
        if ch.get("usage"):
            usage.append(ch["usage"])
        for x in ch["choices"]:
            i = x["index"]
            order.append(i)
            check(i not in finish, f"seed {seed}: a chunk of choice {i} after its finish: {x}")
            if "role" in x["delta"]:
                check(i not in roles and i not in text, f"seed {seed}: choice {i}'s role not first and once: {x}")
                roles[i] = x["delta"]["role"]
            text[i] = text.get(i, "") + (x["delta"].get("content") or "")
            if x["finish_reason"]:
                finish[i] = x["finish_reason"]
    check(roles == {0: "assistant", 1: "assistant", 2: "assistant"}, f"seed {seed}: roles {roles}")
    want = {ch.index: ch.message.content for ch in whole.choices}
    check(text == want, f"seed {seed}: streamed {text} vs whole {want}")
    check(finish == {ch.index: ch.finish_reason for ch in whole.choices}, f"seed {seed}: finishes {finish}")
    check(len(usage) == 1 and chunks[-1].get("usage") == usage[0] and
          usage[0]["completion_tokens"] == whole.usage.completion_tokens and
          usage[0]["prompt_tokens"] == whole.usage.prompt_tokens, f"seed {seed}: usage {usage} vs {whole.usage}")
    check(len(set(order[3:])) > 1 and order[3:] != sorted(order[3:]), f"seed {seed}: choices not interleaved: {order}")
    # completions, through the client
    kw = dict(model="x", prompt="The best thing about summer is", max_tokens=8, temperature=1.0, seed=seed, n=3)
    parts = {}
    for ch in c.completions.create(stream=True, **kw):
        for x in ch.choices:
            parts[x.index] = parts.get(x.index, "") + x.text
    w = c.completions.create(**kw)
    check(parts == {ch.index: ch.text for ch in w.choices}, f"seed {seed}: completions streamed {parts} vs {w}")


def t_n_hangup(c):
    """A client that hangs up on a stream of n choices frees all n sequences."""
    s = serverlib.raw_socket(port_of(c))
    body = json.dumps(dict(model="x", prompt="Once upon a time", max_tokens=900, n=4, stream=True, ignore_eos=True))
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while got.count(b"data: ") < 12:
        got += s.recv(65536)
    running = metric(port_of(c), "doppler_running_sequences")
    s.close()
    check(running == 4, f"n=4 runs on 4 sequences: {running}")
    check(serverlib.wait_until(lambda: metric(port_of(c), "doppler_running_sequences") == 0, 10),
          f"running after the hang-up: {metric(port_of(c), 'doppler_running_sequences')}")


def t_n_errors(c):
    """n is an integer from 1 to the cap (16, and no more than --parallel: 8 here); anything else is 400 naming n."""
    for n in (0, 9, 17, -1, 1.5, "2"):
        try:
            c.completions.create(model="x", prompt="hi", max_tokens=2, n=n)
            check(False, f"n={n!r} accepted")
        except openai.BadRequestError as e:
            err = e.body if isinstance(e.body, dict) else {}
            check("'n'" in str(e) and err.get("param") == "n", f"n={n!r}: {e}")
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=2, n=8)
    check(len(r.choices) == 8, f"n=8 (--parallel 8): {len(r.choices)} choices")


def t_n_json(c):
    """response_format json_schema with n=2: each choice is drawn under its own constraint, and every one parses
    and validates."""
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                               "count": {"enum": [1, 2, 3]}, "ok": {"type": "boolean"}},
              "required": ["color", "count", "ok"], "additionalProperties": False}
    v = jsonschema.Draft202012Validator(schema)
    texts = set()
    for _ in range(2):
        seed = random.randrange(1, 1 << 31)
        r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Pick a color as JSON."}],
                                      n=2, seed=seed, temperature=1.0, max_tokens=300, response_format={
                                          "type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
        check(len(r.choices) == 2, f"seed {seed}: {len(r.choices)} choices")
        for ch in r.choices:
            texts.add(ch.message.content)
            try:
                ok = ch.finish_reason == "stop" and v.is_valid(json.loads(ch.message.content))
            except ValueError:
                ok = False
            check(ok, f"seed {seed}: choice {ch.index}: {ch.finish_reason} {ch.message.content!r}")
    check(len(texts) > 1, f"four constrained choices, one text: {texts}")


def t_no_template():
    tiny = os.path.join(FIXTURES, "llama-tiny.gguf")
    with Server("--ctx", "128", "--parallel", "2", model=tiny) as srv:
        c = client(srv)
        try:
            c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            check(False, "chat on a model without a template was accepted")
        except openai.BadRequestError as e:
            check("no chat template" in str(e) and "/v1/completions" in str(e), f"no-template message: {e}")
        r = c.completions.create(model="x", prompt="hello world", max_tokens=6, temperature=0)
        check(r.usage.completion_tokens >= 1 and r.choices[0].finish_reason in ("stop", "length"),
              f"completion on the tiny model: {r}")
        srv.stop()


def t_template_kwargs():
    """chat_template_kwargs (llama-server's and vLLM's field) over --chat-template-kwargs, member by member:
    Qwen3's template (given with --chat-template) with enable_thinking; output equals `doppler run` with the
    same variables; wrong types and the variables doppler sets are 400s."""
    tiny = os.path.join(FIXTURES, "qwen3-tiny.gguf")
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "Qwen-Qwen3.jinja")
    q = "Why is the sky blue?"
    refs = {on: doppler_run("-m", tiny, "--chat", "--chat-template", tmpl, "-p", q, "-n", "8", "--temp", "0",
                            "--chat-template-kwargs", json.dumps({"enable_thinking": on}))[:-1]
            for on in (False, True)}
    with Server("--ctx", "256", "--parallel", "2", "--chat-template", tmpl, "--chat-template-kwargs",
                '{"enable_thinking": false, "unused": [1]}', model=tiny) as srv:
        c = client(srv)

        def ask(**extra):
            return c.chat.completions.create(model="x", messages=[{"role": "user", "content": q}], max_tokens=8,
                                             temperature=0, **extra)
        off, on = ask(), ask(extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        check(off.choices[0].message.content == refs[False],
              f"server default (thinking off) != doppler run: {off.choices[0].message.content!r} vs {refs[False]!r}")
        check(on.choices[0].message.content == refs[True],
              f"request's enable_thinking true != doppler run: {on.choices[0].message.content!r} vs {refs[True]!r}")
        # thinking off opens the answer with an empty <think>\n\n</think>\n\n block in the prompt
        check(off.usage.prompt_tokens > on.usage.prompt_tokens, f"prompt tokens off {off.usage} on {on.usage}")
        for kw, want in ((5, "must be an object"), ({"messages": []}, "may not set 'messages'")):
            try:
                ask(extra_body={"chat_template_kwargs": kw})
                check(False, f"chat_template_kwargs {kw!r} accepted")
            except openai.BadRequestError as e:
                check(want in str(e) and "chat_template_kwargs" in str(e), f"chat_template_kwargs {kw!r}: {e}")
        srv.stop()


def split_reasoning(text, inside):
    """The reasoning / content split llama-server's deepseek format makes, written from its description:
    an answer opening with <think> (or a prompt ending inside one) has its text up to </think> as reasoning,
    newlines next to the tags and whitespace after </think> dropped."""
    if not inside:
        m = re.match(r"[ \n\r\t]*<think>", text)
        if not m:
            return "", text
        text = text[m.end():]
    text = text.lstrip("\n")
    end = text.find("</think>")
    if end < 0:
        return text.rstrip("\n"), ""
    return text[:end].rstrip("\n"), text[end + 8:].lstrip(" \n\r\t")


def t_reasoning():
    """reasoning_content apart from content (--reasoning-format auto, llama-server's default): DeepSeek-R1's
    template opens the answer inside a <think> block; whole and streamed answers split alike, as the rule
    says of `doppler run`'s text; reasoning_format none leaves it in the content."""
    tiny = os.path.join(FIXTURES, "qwen3-tiny.gguf")
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    q = "What is 2+2?"
    ref = doppler_run("-m", tiny, "--chat", "--chat-template", tmpl, "-p", q, "-n", "24", "--temp", "0")[:-1]
    want_r, want_c = split_reasoning(ref, True)
    with Server("--ctx", "256", "--parallel", "2", "--chat-template", tmpl, model=tiny) as srv:
        c = client(srv)
        msgs = [{"role": "user", "content": q}]
        whole = c.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0).choices[0].message
        got_r = (whole.model_extra or {}).get("reasoning_content", "")
        check(whole.content == want_c and got_r == want_r,
              f"split of {ref!r}: content {whole.content!r} reasoning {got_r!r}, want {want_c!r} / {want_r!r}")
        parts = {"reasoning_content": "", "content": ""}
        for ch in c.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0, stream=True):
            if ch.choices:
                d = ch.choices[0].delta
                parts["content"] += d.content or ""
                parts["reasoning_content"] += (d.model_extra or {}).get("reasoning_content") or ""
        check(parts == {"reasoning_content": want_r, "content": want_c}, f"streamed split {parts}")
        raw = c.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0,
                                        extra_body={"reasoning_format": "none"}).choices[0].message
        check(raw.content == ref and "reasoning_content" not in (raw.model_extra or {}),
              f"reasoning_format none: {raw.content!r} vs {ref!r}")
        try:
            c.chat.completions.create(model="x", messages=msgs, max_tokens=2, extra_body={"reasoning_format": "x"})
            check(False, "reasoning_format 'x' accepted")
        except openai.BadRequestError as e:
            check("reasoning_format" in str(e), f"reasoning_format 'x': {e}")
        srv.stop()
    # the rule itself, on answers a real Qwen3 writes
    check(split_reasoning("<think>\nR\n</think>\n\nC", False) == ("R", "C"), "split_reasoning")


TOOLS = serverlib.TOOLS


def cut_call(choice):
    """Whether the answer's last call is one max_tokens or a stop string cut (its arguments as far as they were
    written: not JSON, or JSON that does not end the call)."""
    calls = choice.message.tool_calls or []
    if choice.finish_reason == "tool_calls" or not calls:
        return False
    try:
        json.loads(calls[-1].function.arguments)
    except ValueError:
        return True
    return False


def check_streamed_calls(whole, chunks, schemas, what):
    """A stream's tool calls against the same request answered whole: OpenAI's shape (a call's first delta has
    its index, id, type and name with arguments "", the next ones the index and a fragment of the arguments
    alone), more than one delta a complete call, the fragments joined the whole answer's arguments, which
    validate against the tool's schema; the same content and finish reason. A call the answer cut (max_tokens,
    a stop string) is a call of both, the same arguments as far as they were written."""
    calls, content, finish = [], "", None
    for ch in chunks:
        for x in ch.choices:
            content += x.delta.content or ""
            finish = x.finish_reason or finish
            for d in x.delta.tool_calls or []:
                if d.index == len(calls):
                    check(d.id and d.type == "function" and d.function.name and d.function.arguments == "",
                          f"{what}: the first delta of call {d.index}: {d}")
                    calls.append([d.function.name, "", 1])
                else:
                    check(d.index == len(calls) - 1 and d.id is None and d.type is None and d.function.name is None
                          and d.function.arguments, f"{what}: a later delta of call {len(calls) - 1}: {d}")
                    calls[-1][1] += d.function.arguments or ""
                    calls[-1][2] += 1
    m = whole.choices[0].message
    want = [(x.function.name, x.function.arguments) for x in m.tool_calls or []]
    got = [(name, args) for name, args, _ in calls]
    check(got == want and content == (m.content or "") and finish == whole.choices[0].finish_reason,
          f"{what}: streamed {got} {content!r} {finish} vs {want} {m.content!r} {whole.choices[0].finish_reason}")
    cut = cut_call(whole.choices[0])
    for k, (name, args, n) in enumerate(calls):
        if cut and k == len(calls) - 1:
            check(name in schemas and finish in ("length", "stop"), f"{what}: the call cut short {name}({args})")
            continue
        check(n > 1 and name in schemas and jsonschema.Draft202012Validator(schemas[name]).is_valid(json.loads(args)),
              f"{what}: the call {name}({args}) in {n} deltas")


def t_tool_choice(c, q, stream, end_id, several):
    """tool_choice "required" and a named function: the answer is calls (the constraint in the template's
    format), parsed into tool_calls whose arguments validate under jsonschema; streamed as they are written,
    into the same calls as answered whole.
    "required" takes one call or more: with the end token favoured (logit_bias) the turn ends after the first;
    left alone, the tiny random model goes on calling (several: the template's tagged blocks may repeat), cut
    by max_tokens; with parallel_tool_calls false, or a named function, exactly one."""
    kw = dict(model="x", messages=q, tools=TOOLS, temperature=1.0,
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    named = lambda f: {"type": "function", "function": {"name": f}}
    for seed, choice, more, n_calls in (
            (1, "required", {"logit_bias": {str(end_id): 100}, "max_tokens": 200}, 1),
            (2, "required", {"max_tokens": 400}, 2 if several else 1),
            (5, "required", {"parallel_tool_calls": False, "max_tokens": 200}, 1),
            (3, named("get_time"), {"max_tokens": 200}, 1), (4, named("get_weather"), {"max_tokens": 200}, 1)):
        r = c.chat.completions.create(seed=seed, tool_choice=choice, **more, **kw)
        ch, m = r.choices[0], r.choices[0].message
        calls = m.tool_calls or []
        # one call: the turn ends with it; several: at least that many, the last one perhaps cut by max_tokens
        # (a call of the answer, its arguments as far as written), or max_tokens came before a block's name
        rest = (m.content or "").strip()
        ok = (ch.finish_reason == "tool_calls" and len(calls) == 1 and not m.content if n_calls == 1 else
              len(calls) >= n_calls and (ch.finish_reason == "tool_calls" and not rest or ch.finish_reason == "length"
                                         and (not rest or rest.startswith("<tool") or "<tool_call>".startswith(rest))))
        if not check(ok, f"tool_choice {choice} ({more}): {ch}"):
            continue
        names = [t["function"]["name"] for t in TOOLS] if choice == "required" else [choice["function"]["name"]]
        for call in calls[:len(calls) - cut_call(ch)]:
            fn = call.function
            spec = [t["function"] for t in TOOLS if t["function"]["name"] == fn.name and fn.name in names]
            check(len(spec) == 1 and jsonschema.Draft202012Validator(spec[0]["parameters"]).is_valid(
                json.loads(fn.arguments)), f"tool_choice {choice}: the call {fn} (of {names})")
        if stream:
            check_streamed_calls(r, c.chat.completions.create(seed=seed, tool_choice=choice, stream=True, **more, **kw),
                                 {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS},
                                 f"tool_choice {choice} streamed")


def utf8(b):
    """Whether the bytes b are whole UTF-8 characters."""
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


MAX_CALL = 1000  # tokens for a call of the tiny random models, which may pad its JSON with much whitespace


def t_cut_call(c, q, key):
    """A constrained call (a named function) cut inside its arguments by max_tokens, or by a stop string: the
    answer not streamed carries the call, its arguments as far as they were written (a prefix of the whole
    call's, not JSON), content null, finish_reason length (a stop string's: stop), as OpenAI's; streamed with
    the same seed, the deltas join into the same call and the same finish reason. key: the arguments' word in
    the template's format ("arguments", Llama's "parameters"). A fresh seed each run: the cut is placed from
    the whole answer's tokens (logprobs), so any seed whose call takes a few tokens of arguments will do."""
    kw = dict(model="x", messages=q, tools=TOOLS, temperature=1.0,
              tool_choice={"type": "function", "function": {"name": "get_weather"}},
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    tried = []
    for _ in range(5):  # a seed whose call the random model pads past max_tokens with whitespace, or whose
        seed = random.randrange(1, 1 << 31)  # arguments come in under three tokens, leaves no cut: another
        whole = c.chat.completions.create(seed=seed, max_tokens=MAX_CALL, logprobs=True, **kw)
        ch = whole.choices[0]
        tried.append((seed, ch.finish_reason))
        if ch.finish_reason != "tool_calls":
            continue
        if not check(len(ch.message.tool_calls or []) == 1 and not ch.message.content,
                     f"seed {seed}: a named function's call: {ch}"):
            return
        full = ch.message.tool_calls[0].function.arguments
        toks = [bytes(t.bytes) for t in ch.logprobs.content]
        text = b"".join(toks)
        # the arguments' value: from its '{' after the key to the '}' closing it
        start = text.index(b"{", text.index(b'"%s"' % key.encode()))
        _, n = json.JSONDecoder().raw_decode(text[start:].decode())
        end = start + len(text[start:].decode()[:n].encode())
        ends = [len(b"".join(toks[:i + 1])) for i in range(len(toks))]
        # cuts after whole characters (the detokenizer ends a cut one with U+FFFD, not in the whole call's text)
        inside = [i for i, e in enumerate(ends) if start < e < end - 1 and utf8(text[:e])]
        if len(inside) >= 3:
            break
    else:
        check(False, f"no seed gave a call of three tokens of arguments or more (seed, finish): {tried}")
        return
    k = inside[len(inside) // 2]
    # a stop string right after the cut, once in the text (whole characters), cuts it at the same place
    stop = next((s.decode() for s in (text[ends[k]:ends[k] + w] for w in range(3, 9) if ends[k] + w <= end)
                 if text.count(s) == 1 and utf8(s)), None)
    for how, more, finish in (("max_tokens", {"max_tokens": k + 1}, "length"),
                              ("a stop string", {"max_tokens": MAX_CALL, "stop": [stop]}, "stop")):
        if how == "a stop string" and not stop:
            continue
        what = f"seed {seed}, cut after {text[:ends[k]]!r} by {how}"
        r = c.chat.completions.create(seed=seed, **more, **kw)
        cut, m = r.choices[0], r.choices[0].message
        calls = m.tool_calls or []
        args = calls[0].function.arguments if len(calls) == 1 else None
        if not check(cut.finish_reason == finish and m.content is None and len(calls) == 1 and
                     calls[0].function.name == "get_weather" and calls[0].id.startswith("call_") and
                     args and full.startswith(args) and args != full and cut_call(cut),
                     f"{what}: {cut}, the whole call's arguments {full!r}"):
            continue
        check_streamed_calls(r, c.chat.completions.create(seed=seed, stream=True, **more, **kw),
                             {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}, f"{what}, streamed")


def shared_fixture(name, test):
    """A file of ../shared/fixtures (or $DOPPLER_SHARED_FIXTURES), or None with a note that test is skipped."""
    shared = os.environ.get("DOPPLER_SHARED_FIXTURES", os.path.join(serverlib.ROOT, "..", "shared", "fixtures"))
    path = os.path.join(shared, name)
    if not os.path.exists(path):
        print(f"  {test}: skipped, no shared fixtures at {shared}")
        return None
    return path


def t_auto_calls():
    """tool_choice "auto" in the <tool_call> format: the answer is free text, but a block it opens holds a call
    the tools' schemas accept (the lazy constraint). On the shared fixtures' tiny Qwen2 of the real vocabulary,
    where <tool_call> is one token: with it favoured (logit_bias) the random model opens a block, and again after
    one unless parallel_tool_calls is false. Streamed, the calls come as they are written, into the same
    calls."""
    model = shared_fixture("qwen2-tokenizer-tiny.gguf", "t_auto_calls")
    if not model:
        return
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "Qwen-Qwen3.jinja")
    out = subprocess.run([serverlib.BIN, "tokenize", "-m", model, "--ids", "--no-bos", "--parse-special",
                          "<tool_call>"], capture_output=True, timeout=60)
    ids = out.stdout.decode().split()
    check(len(ids) == 1, f"<tool_call> is one token of Qwen's vocabulary: {ids}")
    names = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    with Server("--ctx", "4096", "--parallel", "2", "--chat-template", tmpl, model=model) as srv:
        c = client(srv)
        kw = dict(model="x", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                  max_tokens=300, temperature=1.0, logit_bias={ids[0]: 8},
                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        for seed, parallel in ((1, None), (2, False)):
            more = {} if parallel is None else {"parallel_tool_calls": parallel}
            whole = c.chat.completions.create(seed=seed, **more, **kw)
            m = whole.choices[0].message
            calls = m.tool_calls or []
            check(len(calls) >= 2 if parallel is None else len(calls) == 1,
                  f"auto, parallel_tool_calls {parallel}: {len(calls)} calls: {m}")
            for call in calls[:len(calls) - cut_call(whole.choices[0])]:
                fn = call.function
                check(fn.name in names and jsonschema.Draft202012Validator(names[fn.name]).is_valid(
                    json.loads(fn.arguments)), f"auto: the call {fn}")
            check_streamed_calls(whole, c.chat.completions.create(seed=seed, stream=True, **more, **kw), names,
                                 f"auto, parallel_tool_calls {parallel}, streamed")
        srv.stop()


def t_auto_json_calls():
    """tool_choice "auto" in Llama 3.1's JSON format: the answer is free text, but one that opens with '{' is one
    call the tools' schemas accept (the lazy constraint), then only the end; it comes back as a tool call, streamed
    as it is written. On the shared fixtures' tiny Llama 3 (the real vocabulary, random weights), with '{'
    favoured (logit_bias) the model opens its answers with it: each such answer is a call whose arguments
    validate (or one max_tokens cut). Where a tool's schema has a keyword the constraint cannot honour (pattern),
    the answers go unconstrained: the same model's '{' answers then do not parse, so the constraint is what makes
    them calls. Left alone, the model talks: content, streamed as answered whole."""
    model = shared_fixture("llama3-tokenizer-tiny.gguf", "t_auto_json_calls")
    if not model:
        return
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "meta-llama-Llama-3.1-8B-Instruct.jinja")
    out = subprocess.run([serverlib.BIN, "tokenize", "-m", model, "--ids", "--no-bos", "{"], capture_output=True,
                         timeout=60)
    brace = out.stdout.decode().split()
    check(len(brace) == 1, f"'{{' is one token of Llama 3's vocabulary: {brace}")
    names = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    loose = json.loads(json.dumps(TOOLS))
    loose[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]"
    with Server("--ctx", "4096", "--parallel", "2", "--chat-template", tmpl, model=model) as srv:
        c = client(srv)
        kw = dict(model="x", messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=400,
                  temperature=1.0)
        complete = 0
        for seed in range(1, 6):
            whole = c.chat.completions.create(seed=seed, tools=TOOLS, logit_bias={brace[0]: 12}, **kw)
            ch, m = whole.choices[0], whole.choices[0].message
            calls = m.tool_calls or []
            # a call, or one cut by max_tokens: a call still once its name was written, else content (as an
            # unconstrained answer's)
            ok = (len(calls) == 1 and not m.content and ch.finish_reason in ("tool_calls", "length") or
                  not calls and ch.finish_reason == "length" and (m.content or "").lstrip().startswith("{"))
            check(ok, f"auto, Llama's format, seed {seed}: {ch}")
            for call in calls[:len(calls) - cut_call(ch)]:
                fn = call.function
                complete += check(fn.name in names and jsonschema.Draft202012Validator(names[fn.name]).is_valid(
                    json.loads(fn.arguments)), f"auto, Llama's format: the call {fn}")
            check_streamed_calls(whole, c.chat.completions.create(seed=seed, tools=TOOLS, logit_bias={brace[0]: 12},
                                                                  stream=True, **kw), names,
                                 f"auto, Llama's format, seed {seed}, streamed")
            # the tools the constraint cannot honour: the same model's '{' answers, unconstrained, are not calls
            free = c.chat.completions.create(seed=seed, tools=loose, logit_bias={brace[0]: 12}, **kw).choices[0]
            text = free.message.content or ""
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            check(not free.message.tool_calls and text.lstrip().startswith("{") and parsed is None,
                  f"auto, Llama's format, unconstrained, seed {seed}: {free}")
        check(complete >= 3, f"auto, Llama's format: {complete} of 5 answers complete calls")
        # no favour: the random model talks (an answer that opens with '{' would have to be a call)
        for seed in (1, 2):
            talk = dict(kw, max_tokens=20)
            whole = c.chat.completions.create(seed=seed, tools=TOOLS, **talk)
            m = whole.choices[0].message
            check(m.content and not m.content.lstrip().startswith("{") and not m.tool_calls,
                  f"auto, Llama's format, talking: {m}")
            check_streamed_calls(whole, c.chat.completions.create(seed=seed, tools=TOOLS, stream=True, **talk), names,
                                 "auto, Llama's format, talking, streamed")
        srv.stop()


def t_tools():
    """Tools and tool calls through Qwen3's template (--chat-template): the prompt the server renders from
    OpenAI's message form (a call's arguments as the JSON string clients send) has the tokens of transformers'
    rendering (tests/fixtures/chat/golden.json); an answer with tools streams as it answers whole; what the
    server cannot do is a 400. (The split of <tool_call> blocks into tool_calls: test_serve_toolcall and
    test_serve_respond.)"""
    # a synthetic Qwen3 of 4096 positions: the tools preamble alone outgrows the fixtures' 256
    tiny = os.path.join(tempfile.mkdtemp(), "qwen3-synth.gguf")
    subprocess.run([serverlib.BIN, "synth", "--arch", "qwen3", "--preset", "tiny", "--type", "q8_0", "--seed", "3",
                    "-o", tiny], check=True, capture_output=True, timeout=120)
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "Qwen-Qwen3.jinja")
    golden = json.load(open(os.path.join(FIXTURES, "..", "chat", "golden.json")))["cases"]
    cases = [g for g in golden if g["template"] == "qwen" and g.get("tools") and len(g["messages"]) > 1]
    check(len(cases) >= 2, "golden tool conversations")
    with Server("--ctx", "4096", "--parallel", "2", "--chat-template", tmpl, model=tiny) as srv:
        c = client(srv)
        for g in cases:
            msgs = json.loads(json.dumps(g["messages"]))
            for m in msgs:
                for call in m.get("tool_calls", []):
                    call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
            r = c.chat.completions.create(model="x", messages=msgs, tools=g["tools"], max_tokens=4, temperature=0)
            out = subprocess.run([serverlib.BIN, "tokenize", "-m", tiny, "--ids", "--no-bos", "--parse-special",
                                  g["rendered"]], capture_output=True, timeout=60)
            want = len(out.stdout.split())
            check(want > 0 and r.usage.prompt_tokens == want,
                  f"tools prompt: {r.usage.prompt_tokens} tokens, transformers' rendering {want}")
        q = [{"role": "user", "content": "Weather in Paris?"}]
        whole = c.chat.completions.create(model="x", messages=q, tools=cases[0]["tools"], max_tokens=12, temperature=0)
        text, calls, finish = "", [], None
        for ch in c.chat.completions.create(model="x", messages=q, tools=cases[0]["tools"], max_tokens=12,
                                            temperature=0, stream=True):
            if ch.choices:
                d = ch.choices[0].delta
                text += d.content or ""
                calls += d.tool_calls or []
                finish = ch.choices[0].finish_reason or finish
        m = whole.choices[0].message
        n_calls = len({d.index for d in calls})  # a call's deltas share its index
        check((m.content or "") == text and len(m.tool_calls or []) == n_calls and
              whole.choices[0].finish_reason == finish, f"streamed {text!r} {calls} {finish} vs {m} {whole.choices[0]}")
        out = subprocess.run([serverlib.BIN, "tokenize", "-m", tiny, "--ids", "--no-bos", "--parse-special",
                              "<|im_end|>"], capture_output=True, timeout=60)
        end_id = int(out.stdout.split()[0])
        t_tool_choice(c, q, stream=True, end_id=end_id, several=True)
        t_cut_call(c, q, "arguments")
        # n=2 under a named function: each choice drawn under its own constraint, one call each, ids apart
        r = c.chat.completions.create(model="x", messages=q, tools=TOOLS, temperature=1.0, max_tokens=200, seed=4,
                                      n=2, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                      extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        ids = []
        for ch in r.choices:
            calls = ch.message.tool_calls or []
            ids += [x.id for x in calls]
            check(ch.finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "get_weather" and
                  jsonschema.Draft202012Validator(TOOLS[0]["function"]["parameters"]).is_valid(
                      json.loads(calls[0].function.arguments)), f"n=2, a named function: choice {ch.index}: {ch}")
        check(len(r.choices) == 2 and len(set(ids)) == 2, f"n=2, a named function: call ids {ids}")

        try:
            c.chat.completions.create(model="x", messages=q, tools=TOOLS, max_tokens=2,
                                      tool_choice={"type": "function", "function": {"name": "nowhere"}})
            check(False, "tool_choice naming no tool accepted")
        except openai.BadRequestError as e:
            check("not among the tools" in str(e), f"tool_choice naming no tool: {e}")
        srv.stop()
    # Llama 3.1's template teaches its JSON format: tools are taken (the answers' split: test_serve_toolcall)
    llama31 = os.path.join(FIXTURES, "..", "jinja", "templates", "meta-llama-Llama-3.1-8B-Instruct.jinja")
    with Server("--ctx", "4096", "--parallel", "2", "--chat-template", llama31, model=tiny) as srv:
        r = client(srv).chat.completions.create(model="x", messages=q, tools=cases[0]["tools"], max_tokens=4,
                                                temperature=0)
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls") and r.usage.prompt_tokens > 100,
              f"tools with Llama 3.1's template: {r}")
        t_tool_choice(client(srv), q, stream=True, end_id=end_id, several=False)
        t_cut_call(client(srv), q, "parameters")
        srv.stop()
    shutil.rmtree(os.path.dirname(tiny))


def t_api_key():
    with Server("--api-key", "s3cret-key", "--ctx", "256") as srv:
        try:
            client(srv, "wrong").models.list()
            check(False, "wrong key accepted")
        except openai.AuthenticationError as e:
            check("API key" in str(e), f"401 message: {e}")
        r = client(srv, "s3cret-key").completions.create(model="x", prompt="Hi", max_tokens=2, temperature=0)
        check(r.usage.completion_tokens == 2, "right key refused")
        for path, want in (("/health", 200), ("/", 200), ("/metrics", 401), ("/v1/models", 401)):
            st, hd, body = request(srv.port, "GET", path)
            check(st == want, f"GET {path} without a key: {st}, want {want}")
            if want == 401:
                err = json.loads(body)["error"]
                check(err["type"] == "authentication_error" and err["code"] == 401, f"401 body {err}")
        srv.stop()


def t_profile():
    """--profile: a line per engine step whose rows add up to what the requests evaluated, then the op tables
    of decode steps and of steps with prompt rows; the output is what it is without profiling."""
    prompts = ["The sky is", "Once upon a time", "1, 2, 3,"]
    refs = [run_ref("-p", p, "-n", "10", "--temp", "0", "--no-echo") for p in prompts]
    with Server("--profile", "--parallel", "4", "--ctx", "256") as srv:
        c = client(srv)
        rs = parallel([lambda p=p: c.completions.create(model="x", prompt=p, max_tokens=10, temperature=0)
                       for p in prompts])
        srv.stop()
        for p, r, ref in zip(prompts, rs, refs):
            check(r.choices[0].text == ref, f"--profile changed {p!r}: {r.choices[0].text!r} vs {ref!r}")
        err = srv.stderr()
        steps = re.findall(r"\[Serve\] step (\d+): (\d+) decode rows, (\d+) prompt rows \((\d+) sequences\): "
                           r"([0-9.]+) ms \(ops ([0-9.]+) ms\)", err)
        rows = sum(int(d) + int(q) for _, d, q, _, _, _ in steps)
        # every prompt token and every generated token but the last is evaluated once
        want = sum(r.usage.prompt_tokens + r.usage.completion_tokens - 1 for r in rs)
        check(steps and [int(s[0]) for s in steps] == list(range(1, len(steps) + 1)), f"step lines: {steps[:3]}")
        check(rows == want, f"the steps' rows add to {rows}, the requests evaluated {want}")
        check(all(float(s[5]) <= float(s[4]) * 1.05 + 0.5 for s in steps), "an op total beyond its step's wall time")
        for table in ("profile of", "steps with prompt rows"):
            check(table in err, f"no {table!r} table:\n{err[-3000:]}")
        check(re.search(r"\n  lm_head +\d+", err) is not None, "no lm_head row in the tables")


def main():
    need_model()
    with Server("--parallel", "8", "--ctx", "1024") as srv:
        c = client(srv)
        for t in (t_greedy, t_stream, t_stop, t_max_tokens, t_seed, t_logprobs, t_penalties, t_logit_bias,
                  t_prefix_cache, t_errors, t_n, t_n_prompt_once, t_n_stream, t_n_hangup, t_n_errors, t_n_json):
            t0 = time.time()
            t(c)
            print(f"  {t.__name__}: {time.time() - t0:.1f} s", flush=True)
        srv.stop()
    t_no_template()
    t_template_kwargs()
    t_reasoning()
    t_tools()
    t_auto_calls()
    t_auto_json_calls()
    t_api_key()
    t_profile()
    done("serve api")


if __name__ == "__main__":
    main()

"""Constrained JSON output (src/constrain/, response_format) against
independent references:
  - Python's jsonschema validates every text the byte machine writes on
    random walks (tests/test_constrain.c's helper) and judges instances that
    Python generates from the schemas: what jsonschema accepts (written in
    the schema's member order) the machine accepts, what it refuses the
    machine refuses;
  - through the real openai client: json_object and json_schema answers
    parse and validate, pydantic models come back parsed, a stream equals
    its whole answer, and on the greedy path every token the model ranked
    above the chosen one is one that an independent JSON-prefix checker
    (below, the machine's rules written again in Python) refuses.
Run through tests/serve/run (the test venv's Python)."""
import json
import os
import random
import subprocess
import time
from typing import List, Optional

import jsonschema
import openai
import pydantic

from serverlib import BIN, GEMMA, SLOW, Server, check, done, need_model, skip

BUILD = os.path.dirname(os.path.abspath(BIN))
HELPER = os.path.join(BUILD, "test_constrain")

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "ab", 1, 10, None]}, "minItems": 1, "maxItems": 2},
    "ok": {"type": ["boolean", "null"]}, "x": {"type": "number"}}, "required": ["name", "tags"]}
TREE = {"$defs": {"node": {"type": "object", "properties": {
    "v": {"const": {"k": [1, True]}}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
    "required": ["v"], "additionalProperties": False}}, "anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}
SCHEMAS = [PERSON, TREE, {}, {"type": "object"},
           {"type": ["number", "string"], "minLength": 2, "maxLength": 3},
           {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
                                                                        "s": {"type": "string"}},
                                       "required": ["s"]}, "maxItems": 4},
           {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "null"}},
                       "required": ["a", "b"]}]}]


# ------------------------------------------------- instances from Python
def gen(s, rng, defs, depth=0):
    """A random instance of schema s (the subset the machine takes)."""
    if s is True or s == {}:
        s = {"type": rng.choice(["object", "array", "string", "number", "integer", "boolean", "null"])}
        if depth > 2:
            s = {"type": rng.choice(["string", "integer", "null"])}
    if "$ref" in s:
        return gen(defs[s["$ref"].split("/")[-1]], rng, defs, depth + 1)
    if "anyOf" in s:
        return gen(rng.choice(s["anyOf"]), rng, defs, depth)
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rng.choice(s["enum"])
    t = s.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t == "object":
        props = s.get("properties", {})
        req = s.get("required", [])
        if not props:
            return {rng.choice(["k", "é", "a b", "\"q\""]) + str(i): gen({}, rng, defs, depth + 1)
                    for i in range(rng.randint(0, 3))}
        return {k: gen(v, rng, defs, depth + 1) for k, v in props.items()
                if k in req or (depth < 4 and rng.random() < 0.5)}
    if t == "array":
        lo, hi = s.get("minItems", 0), s.get("maxItems", 4)
        n = rng.randint(lo, hi if depth < 4 else lo)
        return [gen(s.get("items", {}), rng, defs, depth + 1) for _ in range(n)]
    if t == "string":
        lo, hi = s.get("minLength", 0), s.get("maxLength", 8)
        return "".join(rng.choice("ab \"\\\n\té日😀\u0001/") for _ in range(rng.randint(lo, hi)))
    if t == "integer":
        return rng.choice([0, -1, 7, rng.randint(-10**15, 10**15)])
    if t == "number":
        return rng.choice([0.5, -2.25, 1e-7, round(rng.uniform(-1e6, 1e6), 6), 3])
    if t == "boolean":
        return rng.random() < 0.5
    return None


def helper(mode, schema, stdin=None, *args):
    r = subprocess.run([HELPER, mode, json.dumps(schema), *args], input=stdin, capture_output=True,
                       timeout=120 * SLOW)
    if r.returncode:
        raise RuntimeError(f"{mode} failed: {r.stderr.decode()[-400:]}")
    # the helper's lines: hex texts or verdicts (testlib's seed line aside)
    return [x for x in r.stdout.decode().splitlines() if x and all(ch in "0123456789abcdef" for ch in x)]


def t_machine():
    rng = random.Random(int(os.environ.get("DOPPLER_TEST_SEED") or time.time()))
    for s in SCHEMAS:
        v = jsonschema.Draft202012Validator(s)
        # the machine's random texts: valid UTF-8, JSON, and valid
        seed = str(rng.randrange(1 << 30))
        bad = 0
        texts = helper("walk", s, None, "100", seed)
        for h in texts:
            try:
                doc = json.loads(bytes.fromhex(h).decode("utf-8"))
                v.validate(doc)
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                bad += 1
                if bad < 4:
                    check(False, f"walk (seed {seed}) of {json.dumps(s)[:60]}: {bytes.fromhex(h)[:200]!r}: {e}")
        check(len(texts) >= 60 and not bad, f"{len(texts)} walks ended, {bad} invalid")
        # Python's instances: jsonschema's verdict is the machine's
        insts = [gen(s, rng, s.get("$defs", {})) for _ in range(60)]
        # enum and const values of objects and arrays are written compactly (docs/serve.md)
        spaced = "const" not in json.dumps(s)
        compact = dict(ensure_ascii=False, separators=(",", ":"))
        forms = []
        for x in insts:
            forms += [json.dumps(x, **compact)] + ([json.dumps(x, ensure_ascii=False, indent=2)] if spaced else [])
        # and broken ones: a member dropped, a value swapped
        for x in insts[:20]:
            if isinstance(x, dict) and x:
                y = dict(x)
                y.pop(rng.choice(list(y)))
                forms.append(json.dumps(y, **compact))
                y = dict(x)
                y[rng.choice(list(y))] = rng.choice([1.5, "s", None, [], {}])
                forms.append(json.dumps(y, **compact))
        got = helper("check", s, "".join(f.encode().hex() + "\n" for f in forms).encode())
        for f, g in zip(forms, got):
            want = v.is_valid(json.loads(f))
            check(g == ("1" if want else "0"), f"{json.dumps(s)[:60]}: machine {g}, jsonschema {want}: {f[:120]!r}")
    # narrower than JSON, as documented: no surrogate escapes, bounded whitespace and digits
    for text in ['"\\ud83d\\ude00"', "[" + " " * 33 + "1]", "12345678901234567", "1.5e1234", " 1"]:
        check(helper("check", {}, (text.encode().hex() + "\n").encode()) == ["0"], f"{text!r} accepted")


# ------------------------------------------- the machine's rules, again
WS = b" \t\n\r"


class Incomplete(Exception):
    pass


class Invalid(Exception):
    pass


def json_prefix(b):
    """'complete' when b is a whole JSON object text under doppler's rules
    (no whitespace before the value, whitespace runs <= 32 bytes, <= 16 digits before and after the point
    and 3 in the exponent, no surrogate escapes, valid UTF-8), 'prefix'
    when it can still become one, else 'invalid'."""
    n = len(b)

    def at(i):
        if i >= n:
            raise Incomplete
        return b[i]

    def ws(i):
        k = 0
        while at(i) in WS:
            i, k = i + 1, k + 1
            if k > 32:
                raise Invalid
        return i

    def digits(i, most):
        k = 0
        while at(i) in b"0123456789":
            i, k = i + 1, k + 1
            if k > most:
                raise Invalid
        if not k:
            raise Invalid
        return i

    def number(i):
        if at(i) == ord("-"):
            i += 1
        i = i + 1 if at(i) == ord("0") else digits(i, 16)
        if at(i) == ord("."):
            i = digits(i + 1, 16)
        if at(i) in b"eE":
            i += 1
            if at(i) in b"+-":
                i += 1
            i = digits(i, 3)
        return i

    def string(i):
        while True:
            c = at(i)
            if c == ord('"'):
                return i + 1
            if c < 0x20:
                raise Invalid
            if c == ord("\\"):
                e = at(i + 1)
                if e == ord("u"):
                    h = b""
                    for k in range(4):
                        d = at(i + 2 + k)
                        if d not in b"0123456789abcdefABCDEF":
                            raise Invalid
                        h += bytes([d])
                        if k == 1 and 0xD8 <= int(h, 16) <= 0xDF:
                            raise Invalid
                    i += 6
                elif e in b'"\\/bfnrt':
                    i += 2
                else:
                    raise Invalid
                continue
            if c < 0x80:
                i += 1
                continue
            ln = 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
            if not ln:
                raise Invalid
            for k in range(1, ln):
                d = at(i + k)
                lo, hi = 0x80, 0xBF
                if k == 1:
                    lo = {0xE0: 0xA0, 0xF0: 0x90}.get(c, 0x80)
                    hi = {0xED: 0x9F, 0xF4: 0x8F}.get(c, 0xBF)
                if not lo <= d <= hi:
                    raise Invalid
            i += ln

    def value(i, only_object=False):
        i = ws(i)
        c = at(i)
        if c == ord("{"):
            i = ws(i + 1)
            if at(i) == ord("}"):
                return i + 1
            while True:
                if at(i) != ord('"'):
                    raise Invalid
                i = ws(string(i + 1))
                if at(i) != ord(":"):
                    raise Invalid
                i = ws(value(i + 1))
                if at(i) == ord("}"):
                    return i + 1
                if at(i) != ord(","):
                    raise Invalid
                i = ws(i + 1)
        if only_object:
            raise Invalid
        if c == ord("["):
            i = ws(i + 1)
            if at(i) == ord("]"):
                return i + 1
            while True:
                i = ws(value(i))
                if at(i) == ord("]"):
                    return i + 1
                if at(i) != ord(","):
                    raise Invalid
                i += 1
        if c == ord('"'):
            return string(i + 1)
        if c == ord("-") or ord("0") <= c <= ord("9"):
            return number(i)
        for lit in (b"true", b"false", b"null"):
            if b[i:i + len(lit)] == lit:
                return i + len(lit)
            if lit.startswith(b[i:]):
                raise Incomplete
        raise Invalid

    if n and b[0] in WS:  # nothing before the value
        return "invalid"
    try:
        return "complete" if value(0, True) == n else "invalid"
    except Incomplete:
        return "prefix"
    except Invalid:
        return "invalid"


# ---------------------------------------------------------- the server
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=300 * SLOW)


MSGS = [{"role": "user", "content": "Describe a person as JSON: name, age and hobbies."}]


def t_json_object(c):
    for seed in range(1, 7):
        r = c.chat.completions.create(model="x", messages=MSGS, max_tokens=300, temperature=1.0, seed=seed,
                                      response_format={"type": "json_object"})
        ch = r.choices[0]
        text = ch.message.content
        if ch.finish_reason == "stop":
            try:
                check(isinstance(json.loads(text), dict), f"seed {seed}: not an object: {text!r}")
            except ValueError as e:
                check(False, f"seed {seed}: {e}: {text!r}")
        else:
            check(json_prefix(text.encode()) == "prefix", f"seed {seed}: cut answer not a prefix: {text!r}")
    # the greedy path, token by token: what the model ranked higher than the pick could not continue the text
    r = c.chat.completions.create(model="x", messages=MSGS, max_tokens=120, temperature=0, logprobs=True,
                                  top_logprobs=20, response_format={"type": "json_object"})
    lp = r.choices[0].logprobs.content
    pre, above, n_above = b"", 0, 0
    for k, e in enumerate(lp):
        cur = pre + bytes(e.bytes)
        check(json_prefix(cur) in ("prefix", "complete"), f"step {k}: {cur!r} is not a JSON prefix")
        for alt in e.top_logprobs:
            if alt.logprob > e.logprob:
                n_above += 1
                if json_prefix(pre + bytes(alt.bytes)) != "invalid":
                    above += 1
                    check(False, f"step {k}: {alt.token!r} ({alt.logprob:.3f}) ranked above the pick {e.token!r} "
                                 f"({e.logprob:.3f}) and continues {pre[-40:]!r}")
        pre = cur
    print(f"  greedy: {len(lp)} tokens, {n_above} better-ranked tokens refused, {r.choices[0].finish_reason}")
    check(n_above > 0, "the constraint never overruled the model: the check saw nothing")


class Pet(pydantic.BaseModel):
    kind: str
    legs: int


class Person(pydantic.BaseModel):
    name: str
    age: int
    hobbies: List[str]
    pet: Optional[Pet]
    score: float


def t_json_schema(c):
    schema = Person.model_json_schema()
    v = jsonschema.Draft202012Validator(schema)
    parsed = 0
    for seed in range(1, 7):
        try:
            r = c.chat.completions.parse(model="x", messages=MSGS, max_tokens=400, temperature=0.8, seed=seed,
                                         response_format=Person)
        except openai.LengthFinishReasonError:  # the client's own refusal of an unfinished answer
            continue
        ch = r.choices[0]
        check(isinstance(ch.message.parsed, Person), f"seed {seed}: parsed {ch.message.parsed!r}")
        check(v.is_valid(json.loads(ch.message.content)), f"seed {seed}: invalid {ch.message.content!r}")
        parsed += 1
    print(f"  pydantic: {parsed} of 6 answers finished within 400 tokens and parsed")
    check(parsed >= 1, "no answer finished within 400 tokens: the parsed path went unchecked")
    # streamed and whole at one seed; /v1/completions too
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": False}}
    wr = c.chat.completions.create(model="x", messages=MSGS, max_tokens=400, temperature=0.9, seed=5,
                                   response_format=rf).choices[0]
    whole = wr.message.content
    parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="x", messages=MSGS, max_tokens=400, temperature=0.9, seed=5, response_format=rf, stream=True)
        if ch.choices]
    check("".join(parts) == whole, f"stream {''.join(parts)!r} != {whole!r}")
    if check(wr.finish_reason == "stop", f"the answer did not finish in 400 tokens: {whole!r}"):
        check(jsonschema.Draft202012Validator(PERSON).is_valid(json.loads(whole)), f"invalid {whole!r}")
    t = c.completions.create(model="x", prompt="A list of two small numbers as JSON:", max_tokens=60,
                             temperature=0, extra_body={"response_format": {
                                 "type": "json_schema", "json_schema": {"name": "a", "schema": {
                                     "type": "array", "items": {"type": "integer"}, "minItems": 2,
                                     "maxItems": 2}}}}).choices[0]
    check(t.finish_reason == "stop" and len(json.loads(t.text)) == 2, f"completions: {t}")
    for rf, want in (({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "string",
                                                                                      "pattern": "^a"}}},
                      "'pattern' is not supported"),
                     ({"type": "json_schema", "json_schema": {"name": "p", "schema": {"$ref": "#/nowhere"}}},
                      "points at nothing"),
                     ({"type": "yaml"}, "is not supported")):
        try:
            c.chat.completions.create(model="x", messages=MSGS, max_tokens=2, response_format=rf)
            check(False, f"{rf} accepted")
        except openai.BadRequestError as e:
            check(want in str(e), f"{rf}: {e}")


def answers(c):
    """Constrained answers at fixed seeds, several at once (the scheduler prepares their masks together)."""
    from concurrent.futures import ThreadPoolExecutor
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}

    def one(seed):
        return c.chat.completions.create(model="x", messages=MSGS, max_tokens=60, temperature=0.9, top_p=0.95,
                                         seed=seed, response_format=rf).choices[0].message.content
    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(one, range(1, 9)))


def main():
    if not os.path.exists(HELPER):
        skip(f"{HELPER} is absent (built with the tests)")
    t0 = time.time()
    t_machine()
    print(f"  t_machine: {time.time() - t0:.1f} s", flush=True)
    need_model()
    with Server("--parallel", "4", "--ctx", "1024", "--host-threads", "0", model=GEMMA) as srv:
        c = client(srv)
        for t in (t_json_object, t_json_schema):
            t0 = time.time()
            t(c)
            print(f"  {t.__name__}: {time.time() - t0:.1f} s", flush=True)
        plain = answers(c)
        srv.stop()
    # the rows sampled on helper threads, several at once: the same answers
    with Server("--parallel", "4", "--ctx", "1024", "--host-threads", "2", model=GEMMA) as srv:
        helped = answers(client(srv))
        srv.stop()
    check(plain == helped, f"--host-threads 2 changed the answers: {plain} vs {helped}")
    check(all(json_prefix(a.encode()) != "invalid" for a in plain), f"answers {plain}")
    done("constrained output")


if __name__ == "__main__":
    main()

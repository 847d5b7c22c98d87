"""GBNF grammars (src/constrain/gbnf.c, --grammar, the server's `grammar`
field) against an independent reference, Python's lark:
  - a few grammars, written here once as small trees, are printed both as
    GBNF and as Lark's EBNF; random strings drawn from the trees (and
    mutated: cut, spliced, a character changed) are judged whole by lark's
    Earley parser and by doppler's machine (tests/test_gbnf.c's helper): the
    verdicts must agree;
  - `doppler run --grammar-file` (greedy and sampled) and the server through
    the openai client (extra_body grammar, both endpoints) write texts lark
    accepts; a bad grammar is exit code 2, or a 400 naming `grammar`.
Run through tests/serve/run (the test venv's Python)."""
import os
import random
import subprocess
import tempfile

import lark
import openai

from serverlib import BIN, FIXTURES, SLOW, Server, check, done, skip

BUILD = os.path.dirname(os.path.abspath(BIN))
HELPER = os.path.join(BUILD, "test_gbnf")
MODEL = os.path.join(FIXTURES, "qwen3-tiny.gguf")


# Trees: ("lit", s), ("cls", [(lo, hi)...], negated), ("seq", [..]), ("alt", [..]), ("rep", x, m, n|None),
# ("ref", name). A grammar is {name: tree} with "root".
def lit(s):
    return ("lit", s)


def cls(spec, neg=False):
    return ("cls", [(ord(a), ord(b)) for a, b in spec], neg)


def seq(*xs):
    return ("seq", list(xs))


def alt(*xs):
    return ("alt", list(xs))


def rep(x, m, n=None):
    return ("rep", x, m, n)


def ref(name):
    return ("ref", name)


DIGIT = cls([("0", "9")])
GRAMMARS = {
    "json": {
        "root": ref("value"),
        "value": alt(ref("object"), ref("array"), ref("string"), ref("number"), lit("true"), lit("false"), lit("null")),
        "object": seq(lit("{"), rep(seq(ref("string"), lit(":"), ref("value"),
                                        rep(seq(lit(","), ref("string"), lit(":"), ref("value")), 0)), 0, 1), lit("}")),
        "array": seq(lit("["), rep(seq(ref("value"), rep(seq(lit(","), ref("value")), 0)), 0, 1), lit("]")),
        "string": seq(lit('"'), rep(alt(cls([('"', '"'), ("\\", "\\"), ("\x00", "\x1f")], True),
                                        seq(lit("\\"), cls([('"', '"'), ("\\", "\\"), ("n", "n"), ("t", "t")]))), 0),
                      lit('"')),
        "number": seq(rep(lit("-"), 0, 1), alt(DIGIT, seq(cls([("1", "9")]), rep(DIGIT, 1))),
                      rep(seq(lit("."), rep(DIGIT, 1)), 0, 1)),
    },
    "arith": {
        "root": ref("expr"),
        "expr": seq(ref("term"), rep(seq(ref("ws"), cls([("+", "+"), ("-", "-")]), ref("ws"), ref("term")), 0)),
        "term": seq(ref("factor"), rep(seq(ref("ws"), cls([("*", "*"), ("/", "/")]), ref("ws"), ref("factor")), 0)),
        "factor": alt(rep(DIGIT, 1), seq(lit("("), ref("ws"), ref("expr"), ref("ws"), lit(")"))),
        "ws": rep(lit(" "), 0, 1),
    },
    "choice": {
        "root": seq(ref("word"), rep(seq(lit(","), rep(lit(" "), 0, 1), ref("word")), 0, 3)),
        "word": alt(lit("yes"), lit("no"), lit("maybe"), lit("yesterday"), lit("n")),
    },
    "unicode": {
        "root": seq(rep(cls([("a", "z"), ("é", "é"), ("\u4e00", "\u9fff")]), 1), lit("-"),
                    rep(cls([("\x00", "\x7f")], True), 2, 2), rep(cls([("\U0001F600", "\U0001F64F")]), 0, 1)),
    },
    "bounds": {
        "root": seq(rep(DIGIT, 2, 4), rep(seq(lit(","), ref("x")), 1), rep(ref("y"), 3, 3), rep(lit("."), 0, 1)),
        "x": rep(cls([("a", "c")]), 0, 2),
        "y": lit("z"),
    },
}


def gbnf_char(c, in_class):
    o = ord(c)
    if c == "\\" or c == '"' or (in_class and c in "[]-^"):
        return "\\" + c
    if o < 0x20 or o == 0x7F:
        return f"\\x{o:02X}"
    return c


def to_gbnf(x):
    k = x[0]
    if k == "lit":
        return '"' + "".join(gbnf_char(c, False) for c in x[1]) + '"'
    if k == "cls":
        body = "".join(gbnf_char(chr(a), True) + ("" if a == b else "-" + gbnf_char(chr(b), True)) for a, b in x[1])
        return "[" + ("^" if x[2] else "") + body + "]"
    if k == "seq":
        return "(" + " ".join(to_gbnf(y) for y in x[1]) + ")"
    if k == "alt":
        return "(" + " | ".join(to_gbnf(y) for y in x[1]) + ")"
    if k == "rep":
        m, n = x[2], x[3]
        op = "*" if (m, n) == (0, None) else "+" if (m, n) == (1, None) else "?" if (m, n) == (0, 1) else \
            f"{{{m},}}" if n is None else f"{{{m},{n}}}" if m != n else f"{{{m}}}"
        return to_gbnf(x[1]) + op
    return x[1]


def lark_char(c):
    """c in a regular expression of Lark's grammar (which reads its escapes first)."""
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    return "\\" + c if c in "\\^$.|?*+()[]{}/-\"" else c


def to_lark(x):
    k = x[0]
    if k == "lit":
        return "(" + " ".join(f"/{lark_char(c)}/" for c in x[1]) + ")" if x[1] else "()"
    if k == "cls":
        body = "".join(lark_char(chr(a)) + ("" if a == b else "-" + lark_char(chr(b))) for a, b in x[1])
        return "/[" + ("^" if x[2] else "") + body + "]/s"
    if k == "seq":
        return "(" + " ".join(to_lark(y) for y in x[1]) + ")"
    if k == "alt":
        return "(" + " | ".join(to_lark(y) for y in x[1]) + ")"
    if k == "rep":
        y, m, n = to_lark(x[1]), x[2], x[3]
        out = " ".join([y] * m)
        if n is None:
            out += f" ({y})*"
        else:
            tail = ""
            for _ in range(n - m):
                tail = f"({y} {tail})?"
            out += " " + tail
        return "(" + out + ")" if out.strip() else "()"
    return "r_" + x[1]


def gbnf_text(g):
    return "".join(f"{name} ::= {to_gbnf(t)}\n" for name, t in g.items())


def lark_parser(g):
    text = "start: r_root\n" + "".join(f"r_{name}: {to_lark(t)}\n" for name, t in g.items())
    text = text.replace("()", "")
    return lark.Lark(text, parser="earley", lexer="dynamic")


def has_ref(x):
    return x[0] == "ref" or (x[0] in ("seq", "alt") and any(has_ref(y) for y in x[1])) or \
        (x[0] == "rep" and has_ref(x[1]))


def draw(g, x, rng, depth=0):
    """A random string of tree x."""
    k = x[0]
    if k == "lit":
        return x[1]
    if k == "cls":
        if x[2]:
            while True:
                c = rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff), rng.randint(0x1f000, 0x1faff),
                                rng.randint(0, 0x1f)])
                if not any(a <= c <= b for a, b in x[1]):
                    return chr(c)
        a, b = rng.choice(x[1])
        return chr(rng.randint(a, b))
    if k == "seq":
        return "".join(draw(g, y, rng, depth) for y in x[1])
    if k == "alt":
        opts = x[1]
        if depth > 6:  # deep enough: alternatives that refer to no rule (the grammars here all have one)
            opts = [y for y in opts if not has_ref(y)] or opts
        return draw(g, rng.choice(opts), rng, depth)
    if k == "rep":
        m, n = x[2], x[3]
        top = n if n is not None else m + (rng.randint(0, 4) if depth < 6 else 0)
        return "".join(draw(g, x[1], rng, depth + 1) for _ in range(rng.randint(m, top)))
    return draw(g, g[x[1]], rng, depth + 1)


def mutate(s, other, rng):
    r = rng.random()
    i = rng.randint(0, len(s))
    if r < 0.25:
        return s[:i]
    if r < 0.45:
        return s[:i] + other[rng.randint(0, len(other)):]
    if r < 0.65 and s:
        i = min(i, len(s) - 1)
        return s[:i] + rng.choice('ab9-,.( )"{}[]:\\é一😀\n') + s[i + 1:]
    if r < 0.8 and s:
        i = min(i, len(s) - 1)
        return s[:i] + s[i + 1:]
    return s + rng.choice(["", "x", ",", "0", " ", "z"])


def lark_accepts(p, s):
    try:
        p.parse(s)
        return True
    except lark.exceptions.LarkError:
        return False


def doppler_accepts(gtext, texts):
    r = subprocess.run([HELPER, "check", gtext], input="".join(t.encode().hex() + "\n" for t in texts).encode(),
                       capture_output=True, timeout=300 * SLOW)
    if r.returncode != 0:
        raise RuntimeError(f"test_gbnf check failed: {r.stderr.decode()}")
    return [line == "1" for line in r.stdout.decode().split()]


def t_reference(seed):
    rng = random.Random(seed)
    for name, g in GRAMMARS.items():
        p = lark_parser(g)
        texts = [draw(g, g["root"], rng) for _ in range(150)]
        texts += [mutate(rng.choice(texts), rng.choice(texts), rng) for _ in range(250)]
        got = doppler_accepts(gbnf_text(g), texts)
        want = [lark_accepts(p, t) for t in texts]
        wrong = [(t, w) for t, g2, w in zip(texts, got, want) if g2 != w]
        check(not wrong, f"{name}: {len(wrong)} of {len(texts)} verdicts differ from lark, e.g. "
                         f"{[(t, 'lark accepts' if w else 'lark refuses') for t, w in wrong[:3]]}")
        check(sum(want[:150]) == 150 and 0 < sum(want[150:]) < 250,
              f"{name}: lark accepts {sum(want[:150])}/150 drawn, {sum(want[150:])}/250 mutated")
        print(f"  {name}: {len(texts)} texts, {sum(want)} accepted, verdicts {'agree' if not wrong else 'DIFFER'}",
              flush=True)


E2E = {"choice": GRAMMARS["choice"], "digits": {"root": rep(DIGIT, 1, 12)}}


def t_run(seed):
    for name, g in E2E.items():
        p = lark_parser(g)
        with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
            f.write(gbnf_text(g))
        try:
            for args in (["--temp", "0"], ["--temp", "1", "-s", str(seed)], ["--temp", "1.5", "-s", str(seed + 1)]):
                r = subprocess.run([BIN, "run", "-m", MODEL, "--grammar-file", f.name, "-n", "40", "-p", "Answer:",
                                    *args], capture_output=True, timeout=300 * SLOW)
                out = r.stdout.decode("utf-8", "replace")
                out = out[:-1] if out.endswith("\n") else out  # run ends its output with a newline
                check(r.returncode == 0 and lark_accepts(p, out), f"run {name} {args}: rc {r.returncode}, {out!r}")
        finally:
            os.unlink(f.name)
    r = subprocess.run([BIN, "run", "-m", MODEL, "--grammar", "root ::= [0-9", "-p", "x"], capture_output=True)
    err = r.stderr.decode()
    check(r.returncode == 2 and "unterminated character class at line 1, column 10" in err and err.count("\n") == 1,
          f"bad grammar: rc {r.returncode}, {err!r}")
    r = subprocess.run([BIN, "run", "-m", MODEL, "--grammar", 'root ::= "a"', "-j", "{}", "-p", "x"],
                       capture_output=True)
    check(r.returncode == 2 and "not both" in r.stderr.decode(), f"grammar and schema: {r.stderr.decode()!r}")


def t_server(seed):
    with Server("--parallel", "2", "--ctx", "512", "--chat-template", "chatml", model=MODEL) as srv:
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=300 * SLOW)
        for name, g in E2E.items():
            p, text = lark_parser(g), gbnf_text(g)
            for i in range(3):
                r = c.completions.create(model="m", prompt="Answer:", max_tokens=40, temperature=1.0, seed=seed + i,
                                         extra_body={"grammar": text})
                out = r.choices[0].text
                check(lark_accepts(p, out) and r.choices[0].finish_reason == "stop", f"completion {name}: {out!r}")
                r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say yes or no."}],
                                              max_tokens=40, temperature=1.0, seed=seed + i,
                                              extra_body={"grammar": text})
                out = r.choices[0].message.content
                check(lark_accepts(p, out), f"chat {name}: {out!r}")
        for bad in ("root ::= expr\nexpr ::= expr \"+\" [0-9] | [0-9]", "root ::= foo", "root ::= \"\\q\""):
            try:
                c.completions.create(model="m", prompt="x", max_tokens=4, extra_body={"grammar": bad})
                check(False, f"grammar {bad!r} accepted")
            except openai.BadRequestError as e:
                check(e.status_code == 400 and (e.body or {}).get("param") == "grammar", f"{bad!r}: {e}")
        try:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                      response_format={"type": "json_object"},
                                      extra_body={"grammar": "root ::= \"a\""})
            check(False, "grammar with response_format accepted")
        except openai.BadRequestError as e:
            check((e.body or {}).get("param") == "grammar", f"grammar with response_format: {e}")
        srv.stop()


def main():
    if not os.path.exists(HELPER):
        skip(f"{HELPER} is absent (the build's test binaries)")
    seed = int(os.environ.get("DOPPLER_TEST_SEED") or random.randrange(1 << 30))
    print(f"seed {seed} (set DOPPLER_TEST_SEED to replay)", flush=True)
    t_reference(seed)
    t_run(seed)
    t_server(seed)
    done("gbnf grammars")


if __name__ == "__main__":
    main()

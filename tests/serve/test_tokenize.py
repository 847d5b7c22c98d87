"""doppler serve's llama-server token endpoints, POST /tokenize and POST /detokenize.

Fresh random texts each run (the seed is printed; DOPPLER_TEST_SEED repeats a run): multilingual text, emoji,
whitespace runs, control characters, random code points and the model's special-token strings whole and cut.
Gemma 3's ids are compared with `doppler tokenize` for every combination of add_special and parse_special; where
the test venv has HF `tokenizers` and the shared fixtures hold the Qwen2 and Llama 3 tokenizers, the ids, every
piece's bytes and the decoded text of random ids are compared with HF's (an implementation that is not doppler's).
Round trips tokenize -> detokenize give the text back (these tokenizers are lossless), the pieces of with_pieces
join into the text's bytes, a piece is a string exactly when its bytes are UTF-8 (a list of byte values
otherwise), control tokens are rendered as llama-server renders them, and every malformed request is a 400 naming
its field, after which the server still answers and exits cleanly."""
import gzip
import json
import os
import random
import subprocess
import tempfile
import unicodedata

import serverlib
from serverlib import BIN, GEMMA, SLOW, Server, check, done, need_model, post, request

N_TEXTS = 40          # random texts per model
N_RANDOM_IDS = 30     # random id sequences per model for /detokenize against HF
MAX_BODY = 1 << 20    # the test server's --max-body, to reach the 413 cheaply

WORDS = ["the", "Hello", "world", "tokenizer", "don't", "I'm", "x = 1;", "foo_bar", "http://example.com/a?b=c&d",
         "3.14159", "1234567", "0x7fff", "Ünïcödé", "naïve", "café", "ÆØÅ", "straße", "'s", "--", "...", "!!!",
         "def f(x):", "{\"k\": [1, 2]}", "<html>", "CamelCaseWord", "ALLCAPS"]
SCRIPTS = ["日本語のテキスト", "中文分词测试", "한국어 문장입니다", "Привет, мир", "Ελληνικά γράμματα", "مرحبا بالعالم",
           "שלום עולם", "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt có dấu", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ﬁﬂ", "Ａｂｃ",
           "e\u0301", "\u200b\u200d", "Ωμέγα", "ἀρχή"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🤗", "🧑🏿‍🚀", "☃", "🦀", "🏳️‍🌈", "🫠"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "        ",
          "\x0b", "\x0c", "\r"]


class Failed(Exception):
    pass


# Random code points come from blocks assigned long ago, and must be assigned in Python's Unicode tables too:
# the classes of a newer character (U+137F2, Unicode 16: a letter to HF, unassigned to Debian 12's PCRE2 10.42,
# whose tables doppler's pre-tokenizer regex uses) differ between the two, which splits "<" apart from what
# follows (a gap of the tokenizer's tables, not of these endpoints).
CP_RANGES = [(1, 0x80), (0x80, 0x530), (0x591, 0x700), (0x900, 0xE00), (0x1100, 0x1200), (0x1E00, 0x2C00),
             (0x3000, 0x3100), (0x4E00, 0xA000), (0xAC00, 0xD7A4), (0xE000, 0xF900), (0xFF00, 0xFFF0),
             (0x1D400, 0x1D800), (0x1F300, 0x1F650), (0x20000, 0x2A6D0), (0xF0000, 0xFFFFE)]


def random_char(rng):
    while True:
        ch = chr(rng.randrange(*rng.choice(CP_RANGES)))
        if unicodedata.category(ch) != "Cn":
            return ch


def random_text(rng, specials):
    """A text of a few random parts; specials: the model's special-token strings."""
    parts = []
    for _ in range(rng.randrange(1, 14)):
        k = rng.random()
        if k < 0.25:
            parts.append(rng.choice(WORDS))
        elif k < 0.4:
            parts.append(rng.choice(SCRIPTS))
        elif k < 0.5:
            parts.append(rng.choice(EMOJI))
        elif k < 0.65:
            parts.append(rng.choice(SPACES))
        elif k < 0.78 and specials:
            s = rng.choice(specials)
            parts.append(s if rng.random() < 0.7 else s[:rng.randrange(1, len(s))])  # whole, or cut
        else:
            parts.append("".join(random_char(rng) for _ in range(rng.randrange(1, 6))))
    return "".join(parts)


def texts_for(rng, specials):
    fixed = ["", " ", "Hello world", "  leading and trailing  ", "\n\n", "a" * 300, "🤗" * 5]
    fixed += [s + "x" + s for s in specials[:3]]
    return fixed + [random_text(rng, specials) for _ in range(N_TEXTS)]


def piece_bytes(p):
    """A with_pieces piece's bytes: a string is UTF-8, a list holds byte values."""
    if isinstance(p, str):
        return p.encode("utf-8")
    if isinstance(p, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 256 for x in p):
        return bytes(p)
    raise Failed(f"a piece is neither a string nor a list of byte values: {p!r}")


def is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def tokenize(port, text, **flags):
    status, r = post(port, "/tokenize", dict(content=text, **flags))
    if not check(status == 200 and isinstance(r, dict) and isinstance(r.get("tokens"), list),
                 f"/tokenize {text[:60]!r} {flags}: {status} {str(r)[:300]}"):
        raise Failed()
    return r["tokens"]


def tokenize_ids(port, text, **flags):
    toks = tokenize(port, text, **flags)
    if not check(all(isinstance(t, int) and not isinstance(t, bool) for t in toks), f"ids that are not integers: "
                                                                                      f"{toks[:20]}"):
        raise Failed()
    return toks


def tokenize_pieces(port, text, **flags):
    """[(id, piece bytes)] of /tokenize with_pieces, checking each entry's form."""
    out = []
    for t in tokenize(port, text, with_pieces=True, **flags):
        if not check(isinstance(t, dict) and set(t) == {"id", "piece"} and isinstance(t["id"], int),
                     f"a with_pieces entry is not {{id, piece}}: {t!r}"):
            raise Failed()
        b = piece_bytes(t["piece"])
        # llama-server's rule: a string when the bytes are UTF-8, the byte values otherwise
        check(isinstance(t["piece"], str) == is_utf8(b), f"piece of {t['id']}: {t['piece']!r} (UTF-8: {is_utf8(b)})")
        out.append((t["id"], b))
    return out


def detokenize(port, ids):
    status, r = post(port, "/detokenize", {"tokens": ids})
    if not check(status == 200 and isinstance(r, dict) and isinstance(r.get("content"), str),
                 f"/detokenize {ids[:20]}: {status} {str(r)[:300]}"):
        raise Failed()
    return r["content"]


def n_vocab(port):
    status, _, data = request(port, "GET", "/v1/models")
    return json.loads(data)["data"][0]["meta"]["n_vocab"]


def run_part(fn, *args):
    try:
        fn(*args)
    except Failed:
        pass  # its check has failed and said why


# ------------------------------------------------------------------ Gemma 3, against `doppler tokenize`

def cli_ids(text, add_special, parse_special):
    """`doppler tokenize --ids` of text (through a file, so that any text passes unchanged)."""
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
    try:
        args = [BIN, "tokenize", "-m", GEMMA, "--ids", "--whole", "-f", f.name]
        args += [] if add_special else ["--no-bos"]
        args += ["--parse-special"] if parse_special else []
        r = subprocess.run(args, capture_output=True, timeout=120 * SLOW)
    finally:
        os.unlink(f.name)
    if r.returncode:
        raise RuntimeError(f"doppler tokenize failed: {r.stderr.decode()[-300:]}")
    return [int(x) for x in r.stdout.split()]


GEMMA_SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>"]


def t_gemma(port, rng):
    texts = texts_for(rng, GEMMA_SPECIALS)
    for text in texts:
        for add_special in (False, True):
            for parse_special in (False, True):
                ids = tokenize_ids(port, text, add_special=add_special, parse_special=parse_special)
                ref = cli_ids(text, add_special, parse_special)
                check(ids == ref, f"{text!r} add_special={add_special} parse_special={parse_special}: {ids[:30]} "
                                  f"!= doppler tokenize's {ref[:30]}")
        # the defaults: add_special false, parse_special true
        check(tokenize_ids(port, text) == cli_ids(text, False, True), f"{text!r}: defaults differ")
        pieces = tokenize_pieces(port, text)
        check([i for i, _ in pieces] == cli_ids(text, False, True), f"{text!r}: with_pieces ids differ")
        joined = b"".join(b for _, b in pieces)
        check(joined == text.encode("utf-8"), f"{text!r}: pieces join to {joined!r}")
        for parse_special in (False, True):
            ids = cli_ids(text, False, parse_special)
            back = detokenize(port, ids)
            check(back == text, f"round trip (parse_special={parse_special}) {text!r} -> {back!r}")
        # a piece that is a whole character sequence detokenizes alone to itself
        for i, b in pieces[:8]:
            if is_utf8(b):
                one = detokenize(port, [i])
                check(one.encode("utf-8") == b, f"detokenize [{i}] = {one!r}, its piece {b!r}")


def t_gemma_fixed(port):
    # BOS with add_special, the control tokens rendered (llama-server renders them: its pieces are
    # common_token_to_piece's with special = true)
    bos = cli_ids("", True, False)
    check(len(bos) == 1, f"Gemma's BOS: {bos}")
    check(tokenize_ids(port, "", add_special=True) == bos, "empty content with add_special is not [BOS]")
    check(tokenize_ids(port, "") == [], "empty content is not []")
    p = tokenize_pieces(port, "x", add_special=True)
    check(p[:1] == [(bos[0], b"<bos>")], f"BOS piece: {p[:1]}")
    turn = cli_ids("<start_of_turn>", False, True)
    check(len(turn) == 1, f"<start_of_turn> is not one token: {turn}")
    check(detokenize(port, bos + turn + cli_ids("user\nhi", False, True)) == "<bos><start_of_turn>user\nhi",
          "control tokens are not rendered in /detokenize")
    check(detokenize(port, []) == "", "detokenize [] is not empty")
    # bytes that are no character: byte-fallback pieces as lists, joined back; a cut character is U+FFFD
    rare = "\U00023456\U0002B740"
    pieces = tokenize_pieces(port, rare)
    check(any(not is_utf8(b) for _, b in pieces), f"no byte piece for {rare!r}: {pieces}")
    check(b"".join(b for _, b in pieces) == rare.encode("utf-8"), f"rare pieces {pieces}")
    ids = [i for i, _ in pieces]
    check(detokenize(port, ids) == rare, "rare round trip")
    check(detokenize(port, ids[:1]) == "\ufffd", f"a cut character: {detokenize(port, ids[:1])!r}")
    # a long text within the body limit
    text = "Lorem ipsum dolor sit amet, 日本語 🤗. " * 9000
    ids = tokenize_ids(port, text)
    check(len(ids) > 50000 and detokenize(port, ids) == text, f"a {len(text)}-character text: {len(ids)} tokens")


def t_errors(port, vocab):
    cases = [
        ("/tokenize", b"not json", None), ("/tokenize", b"", None), ("/tokenize", b"[1, 2]", None),
        ("/tokenize", b'"text"', None), ("/tokenize", b'{"content": "a"} x', None),
        ("/tokenize", b'{"content": "a\\u0000b"}', None), ("/tokenize", b'{"content": "\xff\xfe"}', None),
        ("/tokenize", {}, "content"), ("/tokenize", {"content": None}, "content"),
        ("/tokenize", {"content": 5}, "content"), ("/tokenize", {"content": ["a"]}, "content"),
        ("/tokenize", {"content": {"a": 1}}, "content"), ("/tokenize", {"text": "a"}, "content"),
        ("/tokenize", {"content": "a", "add_special": 1}, "add_special"),
        ("/tokenize", {"content": "a", "add_special": "true"}, "add_special"),
        ("/tokenize", {"content": "a", "parse_special": "yes"}, "parse_special"),
        ("/tokenize", {"content": "a", "parse_special": 0}, "parse_special"),
        ("/tokenize", {"content": "a", "with_pieces": []}, "with_pieces"),
        ("/detokenize", b"{", None), ("/detokenize", b"[]", None), ("/detokenize", b"\xc3(", None),
        ("/detokenize", {}, "tokens"), ("/detokenize", {"tokens": None}, "tokens"),
        ("/detokenize", {"tokens": "1 2"}, "tokens"), ("/detokenize", {"tokens": 1}, "tokens"),
        ("/detokenize", {"tokens": {"0": 1}}, "tokens"), ("/detokenize", {"tokens": [1, "2"]}, "tokens"),
        ("/detokenize", {"tokens": [1, 2.5]}, "tokens"), ("/detokenize", {"tokens": [-1]}, "tokens"),
        ("/detokenize", {"tokens": [vocab]}, "tokens"), ("/detokenize", {"tokens": [5, vocab + 7]}, "tokens"),
        ("/detokenize", {"tokens": [2 ** 31]}, "tokens"), ("/detokenize", {"tokens": [2 ** 64]}, "tokens"),
        ("/detokenize", {"tokens": [1e300]}, "tokens"), ("/detokenize", {"tokens": [-1e300]}, "tokens"),
        ("/detokenize", {"tokens": [[1]]}, "tokens"), ("/detokenize", {"tokens": [True]}, "tokens"),
        ("/detokenize", {"tokens": [None]}, "tokens"), ("/detokenize", {"tokens": [{"id": 1}]}, "tokens"),
    ]
    for path, body, param in cases:
        status, r = post(port, path, body)
        err = r.get("error") if isinstance(r, dict) else None
        ok = status == 400 and isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"]
        check(ok and err.get("param") == param and err.get("code") == 400 and "\n" not in err["message"],
              f"{path} {body!r}: want 400 naming {param}, got {status} {str(r)[:300]}")
        if ok and param:
            check(param in err["message"], f"{path} {body!r}: the message does not name {param}: {err['message']}")
    # a position beyond the vocabulary is named in the message
    status, r = post(port, "/detokenize", {"tokens": [1, 2, vocab]})
    check(status == 400 and "tokens[2]" in str(r), f"the bad id's index is not named: {r}")
    # the server's body limit holds here too, and the method is checked
    for path, body in (("/tokenize", {"content": "x" * (MAX_BODY + 10)}),
                       ("/detokenize", {"tokens": [1] * (MAX_BODY // 2)})):
        try:
            status, _ = post(port, path, body)
        except OSError as e:  # the server answers before the body is sent only on an unknown path
            status = repr(e)
        check(status == 413, f"{path} over --max-body: {status}")
        status, _, _ = request(port, "GET", path)
        check(status == 405, f"GET {path}: {status}")
    status, _, _ = request(port, "GET", "/health")
    check(status == 200, "the server does not answer after the malformed requests")


# ------------------------------------------------------------ Qwen2 and Llama 3, against HF tokenizers

# What each tokenizer adds with add_special: Llama 3's prepends <|begin_of_text|> (Meta's TemplateProcessing,
# which the npm tokenizer.json of the fixture leaves out), Qwen2's adds nothing.
HF_FIXTURES = [("qwen2", None, ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "<think>",
                                "<|vision_start|>"]),
               ("llama3", "<|begin_of_text|>", ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                                                "<|end_header_id|>", "<|reserved_special_token_5|>",
                                                "<|python_tag|>"])]


def byte_decoder():
    """GPT-2's byte-level alphabet (a printable character per byte), reversed."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class HF:
    def __init__(self, name, bos):
        from tokenizers import Tokenizer
        data = gzip.open(os.path.join(serverlib_shared(), f"{name}-tokenizer", "tokenizer.json.gz")).read().decode()
        self.tok = Tokenizer.from_str(data)
        self.split = Tokenizer.from_str(data)
        self.split.encode_special_tokens = True  # parse_special false: special strings are text
        self.added = {i: t.content for i, t in self.tok.get_added_tokens_decoder().items()}
        self.bos = [self.tok.token_to_id(bos)] if bos else []
        self.bd = byte_decoder()

    def encode(self, text, add_special, parse_special):
        ids = (self.tok if parse_special else self.split).encode(text, add_special_tokens=False).ids
        return (self.bos if add_special else []) + ids

    def piece(self, i):
        if i in self.added:
            return self.added[i].encode("utf-8")
        return bytes(self.bd[c] for c in self.tok.id_to_token(i))

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)


def serverlib_shared():
    return os.environ.get("DOPPLER_SHARED_FIXTURES") or os.path.join(serverlib.ROOT, "..", "shared", "fixtures")


def t_hf(name, bos, specials, rng):
    model = os.path.join(serverlib_shared(), f"{name}-tokenizer-tiny.gguf")
    tj = os.path.join(serverlib_shared(), f"{name}-tokenizer", "tokenizer.json.gz")
    if not (os.path.exists(model) and os.path.exists(tj)):
        print(f"  SKIP the {name} comparison with HF: {model} or {tj} is absent", flush=True)
        return
    hf = HF(name, bos)
    with Server("--parallel", "1", "--ctx", "256", model=model) as srv:
        port = srv.port
        vocab = n_vocab(port)
        for text in texts_for(rng, specials):
            try:
                for add_special in (False, True):
                    for parse_special in (False, True):
                        ids = tokenize_ids(port, text, add_special=add_special, parse_special=parse_special)
                        ref = hf.encode(text, add_special, parse_special)
                        check(ids == ref, f"{name} {text!r} add_special={add_special} parse_special="
                                          f"{parse_special}: {ids[:30]} != HF's {ref[:30]}")
                pieces = tokenize_pieces(port, text, add_special=True)
                check([i for i, _ in pieces] == hf.encode(text, True, True), f"{name} {text!r}: with_pieces ids")
                for i, b in pieces:
                    if not check(b == hf.piece(i), f"{name}: the piece of {i} is {b!r}, HF's {hf.piece(i)!r}"):
                        break
                # lossless up to HF's normalizer (Qwen2's is NFC: "e\u0301" comes back as "\u00e9")
                norm = hf.tok.normalizer.normalize_str(text) if hf.tok.normalizer else text
                body = b"".join(b for _, b in pieces[len(hf.bos):])
                check(body == norm.encode("utf-8"), f"{name} {text!r}: pieces join to {body!r}")
                ids = hf.encode(text, False, True)
                back = detokenize(port, ids)
                check(back == norm and back == hf.decode(ids), f"{name} round trip {text!r} -> {back!r}")
            except Failed:
                pass
        # random ids, special ones among them: the text HF decodes (bytes that are no character each become
        # U+FFFD by the same rule)
        special_ids = sorted(hf.added)
        for _ in range(N_RANDOM_IDS):
            ids = [rng.choice(special_ids) if rng.random() < 0.1 else rng.randrange(vocab)
                   for _ in range(rng.randrange(1, 40))]
            ids = [i for i in ids if i < vocab and (i in hf.added or hf.tok.id_to_token(i) is not None)]
            try:
                got = detokenize(port, ids)
            except Failed:
                continue
            want = hf.decode(ids)
            check(got == want, f"{name} detokenize {ids}: {got!r} != HF's {want!r}")
            check(got == b"".join(hf.piece(i) for i in ids).decode("utf-8", "replace"),
                  f"{name} detokenize {ids}: {got!r} is not its pieces' text")
        srv.stop()


def main():
    need_model()
    seed = int(os.environ.get("DOPPLER_TEST_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"seed {seed} (DOPPLER_TEST_SEED={seed} repeats this run)", flush=True)
    rng = random.Random(seed)
    with Server("--parallel", "2", "--ctx", "512", "--max-body", str(MAX_BODY)) as srv:
        vocab = n_vocab(srv.port)
        run_part(t_gemma, srv.port, rng)
        run_part(t_gemma_fixed, srv.port)
        run_part(t_errors, srv.port, vocab)
        srv.stop()
    try:
        import tokenizers  # noqa: F401  (HF's reference: tests/serve/requirements.txt)
    except ImportError:
        print("  SKIP the comparison with HF: the test venv has no `tokenizers` (scripts/setup-test-venv)",
              flush=True)
    else:
        for name, bos, specials in HF_FIXTURES:
            t_hf(name, bos, specials, rng)
    done("serve tokenize")


if __name__ == "__main__":
    main()

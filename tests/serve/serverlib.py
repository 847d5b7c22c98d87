"""Shared pieces of the doppler serve tests: start and stop a server on a free
port, raw HTTP and SSE helpers, `doppler run` for references, and checks that
count failures. Run through tests/serve/run (the test venv's Python)."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.environ.get("DOPPLER_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BIN = os.environ.get("DOPPLER_BIN") or os.path.join(ROOT, "build", "doppler")
MODELS = os.environ.get("DOPPLER_MODELS") or os.path.join(os.path.expanduser("~"), ".cache", "doppler", "models")
GEMMA = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "models")
# Sanitizer builds are several times slower: timeouts scale with this.
SLOW = 4 if os.environ.get("ASAN_OPTIONS") or os.environ.get("DOPPLER_TEST_SLOW") else 1

failures = 0
checks = 0


# bounded arguments, so that a random model's constrained call ends
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "maxLength": 12},
                                               "unit": {"enum": ["celsius", "fahrenheit"]}},
                                               "required": ["city", "unit"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}}}]


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("CHECK failed:", msg, flush=True)
    return cond


def done(name):
    print(f"{name}: {checks - failures}/{checks} checks passed", flush=True)
    sys.exit(1 if failures else 0)


def skip(why):
    print("SKIP:", why, flush=True)
    sys.exit(77)


def need_model(path=GEMMA):
    if not os.path.exists(path):
        skip(f"{path} is absent (scripts/fetch-models downloads it)")
    return path


class Server:
    """doppler serve on 127.0.0.1 and a free port; stderr is collected."""

    def __init__(self, *args, model=None):
        self.args = ["serve", "--port", "0", "-m", model or need_model(), *args]
        self.p = subprocess.Popen([BIN, *self.args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def reader():
            for raw in self.p.stderr:
                line = raw.decode("utf-8", "replace")
                self.lines.append(line)
                m = re.search(r"listening on http://[^ ]*:(\d+)/", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=reader, daemon=True)
        self.thread.start()
        if not ready.wait(60 * SLOW) or self.port is None:
            self.p.kill()
            raise RuntimeError("doppler serve did not start:\n" + "".join(self.lines))

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def stderr(self):
        return "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server and waits; checks it exits 0 and no sanitizer spoke."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            check(False, f"doppler serve did not exit within {timeout * SLOW} s of signal {sig}")
        self.thread.join(10)
        err = self.stderr()
        check(rc == 0, f"doppler serve exited {rc}; stderr:\n{err[-4000:]}")
        bad = [k for k in ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")
               if k in err]
        check(not bad, f"sanitizer report in the server's stderr:\n{err[-6000:]}")
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.stop()


def request(port, method, path, body=None, headers=None, timeout=120):
    """One HTTP request on its own connection: (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * SLOW)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, data


def post(port, path, body, **kw):
    status, hd, data = request(port, "POST", path, body, **kw)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def sse_events(resp):
    """The data payloads of a server-sent event stream, as strings."""
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("data: "):
            yield line[6:]


def sse_raw(port, path, body, timeout=300):
    """A streamed request's chunks (parsed) and [DONE] lines, raw, with how many chunks came after the first
    [DONE]."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * SLOW)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    chunks, done_lines, after = [], 0, 0
    for d in sse_events(resp):
        if d == "[DONE]":
            done_lines += 1
            continue
        after += done_lines > 0
        chunks.append(json.loads(d))
    c.close()
    return chunks, done_lines, after


def stream_text(port, path, body, timeout=300):
    """Streams a request; returns (text, finish_reason, events, done_seen)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * SLOW)
    c.request("POST", path, body=json.dumps(dict(body, stream=True)), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        raise RuntimeError(f"status {r.status}: {data[:300]!r}")
    text, finish, n, done_seen = "", None, 0, False
    for d in sse_events(r):
        if d == "[DONE]":
            done_seen = True
            break
        ev = json.loads(d)
        n += 1
        if "error" in ev:
            raise RuntimeError("error event: " + d)
        for ch in ev["choices"]:
            piece = ch["delta"].get("content") if "delta" in ch else ch.get("text")
            text += piece or ""
            finish = ch.get("finish_reason") or finish
    c.close()
    return text, finish, n, done_seen


def metric(port, name):
    """A gauge or counter from /metrics (labels included in name, as written)."""
    status, _, data = request(port, "GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def doppler_run(*args):
    """`doppler run` stdout (text) for a reference."""
    r = subprocess.run([BIN, "run", *args], capture_output=True, timeout=300 * SLOW)
    if r.returncode != 0:
        raise RuntimeError(f"doppler run {args} failed: {r.stderr.decode()[-500:]}")
    return r.stdout.decode("utf-8")


def wait_until(fn, timeout, step=0.05):
    t_end = time.time() + timeout * SLOW
    while time.time() < t_end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()


def raw_socket(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30 * SLOW)
    return s

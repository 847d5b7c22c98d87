"""The chat page at / in a real headless browser (Debian's chromium, driven
over the DevTools protocol on --remote-debugging-pipe with the standard
library only): the page loads with the model's name, a message typed and
sent with Enter streams the same answer the API gives, tokens/s are shown,
and the stop button ends a long answer while the server frees its sequence."""
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from serverlib import FIXTURES, SLOW, Server, check, done, metric, need_model, post, wait_until


class Browser:
    """chromium --headless with the DevTools protocol on fds 3 (in) and 4 (out)."""

    def __init__(self, exe):
        self.dir = tempfile.mkdtemp(prefix="doppler-chromium-")
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--remote-debugging-pipe", f"--user-data-dir={self.dir}",
                "about:blank"]
        acts = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2),
                (os.POSIX_SPAWN_DUP2, to_r, 3), (os.POSIX_SPAWN_DUP2, from_w, 4)]
        self.pid = os.posix_spawn(exe, args, os.environ, file_actions=acts)
        for fd in (to_r, from_w, null):
            os.close(fd)
        self.buf = b""
        self.next_id = 0
        self.session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:  # replies and events, NUL-separated; events are not needed here
            while b"\0" not in self.buf:
                chunk = os.read(self.from_r, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_js(self, expr, timeout):
        return wait_until(lambda: self.js(expr), timeout, step=0.1)

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.to_w)
        os.close(self.from_r)
        shutil.rmtree(self.dir, ignore_errors=True)


LAST = "document.querySelector('#messages .msg.assistant:last-child, #messages .msg.error:last-child')"


def send_typed(b, text, temperature, max_tokens):
    b.js(f"document.getElementById('temperature').value = '{temperature}';"
         f"document.getElementById('max_tokens').value = '{max_tokens}';"
         "document.getElementById('prompt').focus(); true")
    b.call("Input.insertText", text=text)  # typed as a user types
    for kind in ("keyDown", "keyUp"):
        b.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13)


@contextlib.contextmanager
def page_on(exe, *args, model=None):
    """doppler serve with args and chromium on its page, loaded: yields (server, browser); closes both."""
    with Server(*args, model=model) as srv:
        b = Browser(exe)
        try:
            b.call("Page.navigate", url=srv.base + "/")
            b.wait_js("document.readyState === 'complete' && document.getElementById('model').textContent", 30)
            yield srv, b
        finally:
            b.close()
        srv.stop()


def ask_both(b, srv, q, max_tokens, **extra):
    """q typed into the page (greedy) and sent to the API (with extra fields): the page's final state and the
    API's message."""
    send_typed(b, q, 0, max_tokens)
    state = b.wait_js(f"{LAST} && {LAST}.dataset.state !== 'running' && {LAST}.dataset.state", 120)
    st, r = post(srv.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": q}],
                                                    "max_tokens": max_tokens, "temperature": 0, **extra})
    return state, r["choices"][0]["message"] if st == 200 else {}


def main():
    need_model()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        skip_msg = "chromium is not installed (scripts/setup-deps installs it as root)"
        print("SKIP:", skip_msg)
        raise SystemExit(77)
    with Server("--parallel", "2", "--ctx", "1024") as srv:
        b = Browser(exe)
        try:
            b.call("Page.navigate", url=srv.base + "/")
            model = b.wait_js("document.readyState === 'complete' && document.getElementById('model').textContent",
                              30)
            check(model == "gemma-3-270m-q4_k_m.gguf", f"model name on the page: {model!r}")

            check(b.js("document.getElementById('think_label').hidden") is True,
                  "the thinking switch shown for a template without enable_thinking")
            state, m = ask_both(b, srv, "Name three colors.", 12)
            answer, want = b.js(f"{LAST}.textContent"), m.get("content")
            check(state == "done" and answer == want, f"page answer {state} {answer!r} != API {want!r}")
            stats = b.js("document.getElementById('stats').textContent")
            check(re.search(r"\d+ tokens, [\d.]+ tok/s", stats or ""), f"tokens/s shown: {stats!r}")
            check(b.js("document.getElementById('prompt').value") == "", "the prompt box was emptied")

            # stop: a long answer, stopped after a few tokens
            gen0 = metric(srv.port, "doppler_generated_tokens_total")
            send_typed(b, "Write a very long story about a lighthouse keeper.", 0.7, 900)
            b.wait_js(f"{LAST} && {LAST}.dataset.state === 'running' && {LAST}.textContent.length > 10", 120)
            check(b.js("document.getElementById('stop').disabled") is False, "stop enabled while streaming")
            b.js("document.getElementById('stop').click(); true")
            state = b.wait_js(f"{LAST}.dataset.state !== 'running' && {LAST}.dataset.state", 30)
            check(state == "stopped", f"after stop: {state}")
            freed = wait_until(lambda: metric(srv.port, "doppler_running_sequences") == 0, 10)
            check(freed, "the stopped answer's sequence was not freed")
            gen = metric(srv.port, "doppler_generated_tokens_total") - gen0
            check(gen < 300, f"{gen:.0f} tokens generated after stop")
            check(b.js("document.getElementById('send').disabled") is False, "send enabled again")
        finally:
            b.close()
        srv.stop()
    # a reasoning answer: the thinking in its own block above the reply, as the API splits it
    # (DeepSeek-R1's template opens the answer inside <think> on the tiny Qwen3 fixture)
    tiny = os.path.join(FIXTURES, "qwen3-tiny.gguf")
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    with page_on(exe, "--parallel", "2", "--ctx", "256", "--chat-template", tmpl, model=tiny) as (srv, b):
        state, m = ask_both(b, srv, "Think first.", 16)
        thought = b.js(f"({LAST}.querySelector('.thinking') || {{textContent: null}}).textContent")
        check(state == "done" and m.get("reasoning_content") and thought == m.get("reasoning_content"),
              f"page thinking {state} {thought!r} != API reasoning_content {m.get('reasoning_content')!r}")
        check(b.js(f"{LAST}.textContent") == (thought or "") + m.get("content", ""), "page reply after thinking")
    # Qwen3's template reads enable_thinking: the page offers the switch, and off it asks as the API does with
    # chat_template_kwargs {"enable_thinking": false} (the empty <think> block in the prompt)
    qwen3 = os.path.join(FIXTURES, "..", "jinja", "templates", "Qwen-Qwen3.jinja")
    with page_on(exe, "--parallel", "2", "--ctx", "256", "--chat-template", qwen3, model=tiny) as (srv, b):
        shown = b.wait_js("document.getElementById('think_label').hidden === false", 30)
        check(shown is True, "no thinking switch for Qwen3's template")
        b.js("document.getElementById('think').click(); true")
        state, m = ask_both(b, srv, "Hi", 8, chat_template_kwargs={"enable_thinking": False})
        st, on = post(srv.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 8, "temperature": 0})
        page = b.js(f"{LAST}.textContent")
        check(state == "done" and page == (m.get("reasoning_content") or "") + (m.get("content") or ""),
              f"page with thinking off {page!r} != API {m}")
        m_on = on["choices"][0]["message"] if st == 200 else {}
        check((m_on.get("reasoning_content"), m_on.get("content")) != (m.get("reasoning_content"), m.get("content")),
              f"the switch cannot show here: the answers with thinking on and off are alike ({m_on})")
    done("serve page")


if __name__ == "__main__":
    main()

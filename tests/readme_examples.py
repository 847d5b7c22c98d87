#!/usr/bin/env python3
"""Runs the README's shell examples as written.

Every line of a ```sh block that calls $D (the doppler binary) runs with bash
in a scratch directory (docs/ linked in, stdin empty) and must exit 0. Lines
that cannot run here are skipped with the reason: the set-up scripts (CI runs
them itself), the HF reference scripts (they need the venv of
tools/reference/), verify without a GPU, and lines naming a file that does not
exist (a model not fetched, or the output of a skipped line). A `$D serve`
line starts the server in the background (it runs until stopped); the `curl`
lines after it run against it, and it is stopped with SIGTERM at the end,
which must end it with exit 0.

Environment: DOPPLER_BIN (the binary), DOPPLER_SOURCE_DIR (the checkout).
Exit 0 when every runnable example passed, 1 otherwise, 77 when none could run.
"""
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = os.environ.get("DOPPLER_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(os.environ.get("DOPPLER_BIN") or os.path.join(SRC, "build", "doppler"))
FILE_RE = re.compile(r"\.(gguf|trace|txt)$")


def examples(readme):
    """The commands of the sh blocks, continuation lines joined."""
    out, block, pending = [], False, ""
    for line in open(readme, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("```"):
            block = line.strip() == "```sh"
            continue
        if not block:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((pending + line).strip())
        pending = ""
    return [c for c in out if c]


def outputs_of(cmd):
    words = shlex.split(cmd, comments=True)
    return {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--output")}


def skip_reason(cmd, cwd, unmade, server):
    if cmd.startswith("./scripts/") or cmd.startswith("scripts/"):
        return "a set-up script (CI runs it itself)"
    if cmd.startswith("python"):
        return "needs the HF reference venv (tools/reference/README.md)"
    if "$D" not in cmd and not (cmd.startswith("curl ") and server):
        return "does not run doppler"
    words = shlex.split(cmd, comments=True)
    if "verify" in words and not os.path.exists("/dev/nvidia0"):
        return "verify needs a CUDA GPU"
    outputs = outputs_of(cmd)
    for w in words:
        path = os.path.expanduser(w)
        if FILE_RE.search(w) and w not in outputs and not os.path.exists(os.path.join(cwd, path)):
            return "needs %s, %s" % (w, "the output of a skipped example" if w in unmade
                                     else "which is missing (scripts/fetch-models fetches the models)")
    return None


def start_server(cmd, cwd, env):
    """The README's serve line in the background; the process once /health
    answers on the port it names (default 8080), a string saying why the line
    is skipped, or None."""
    words = shlex.split(cmd, comments=True)
    port = int(words[words.index("--port") + 1]) if "--port" in words else 8080
    try:  # a port another program holds would answer /health for a server that then fails to bind
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return "port %d is in use by another program" % port
    except OSError:
        pass
    p = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if p.poll() is not None:
            return None
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
                if r.status == 200:
                    return p
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    p.wait()
    return None


def main():
    readme = os.path.join(SRC, "README.md")
    cmds = examples(readme)
    if not os.path.exists(BIN):
        print("SKIP: no doppler binary at %s" % BIN)
        return 77
    passed = failed = skipped = 0
    with tempfile.TemporaryDirectory(prefix="doppler-readme-") as cwd:
        os.symlink(os.path.join(SRC, "docs"), os.path.join(cwd, "docs"))
        env = dict(os.environ, D=BIN)
        unmade = set()
        server = None
        for cmd in cmds:
            if re.match(r"^D=", cmd):
                continue
            why = skip_reason(cmd, cwd, unmade, server)
            if why:
                unmade |= outputs_of(cmd)
                print("SKIP %s\n     (%s)" % (cmd, why))
                skipped += 1
                continue
            if "serve" in shlex.split(cmd, comments=True):
                server = start_server(cmd, cwd, env)
                if isinstance(server, str):
                    print("SKIP %s\n     (%s)" % (cmd, server))
                    server = None
                    skipped += 1
                elif server:
                    print("ok   %s (started)" % cmd)
                    passed += 1
                else:
                    print("FAIL %s\n     the server did not answer /health" % cmd)
                    failed += 1
                continue
            r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, errors="replace", timeout=600)
            if r.returncode == 0 and cmd.startswith("curl ") and '{"error"' in r.stdout:
                print("FAIL %s\n     the server answered an error: %s" % (cmd, r.stdout.strip()[-600:]))
                failed += 1
            elif r.returncode == 0:
                print("ok   %s" % cmd)
                passed += 1
            else:
                print("FAIL %s\n     exit %d: %s" % (cmd, r.returncode, (r.stderr or r.stdout).strip()[-600:]))
                failed += 1
        if server:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                rc = "none (killed after 60 s)"
            if rc != 0:
                print("FAIL the README's server exited %s after SIGTERM" % rc)
                failed += 1
    print("readme_examples: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
    if failed:
        return 1
    return 0 if passed else 77


if __name__ == "__main__":
    sys.exit(main())

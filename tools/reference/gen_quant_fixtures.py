#!/usr/bin/env python3
"""Writes the quantized-format fixtures of tests/fixtures/quant/.

For every element type doppler computes with (F32, F16, BF16, Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) it writes random blocks and
the float32 values that the PyPI `gguf` package's numpy dequantizer
(`gguf.quants.dequantize`) gives for them, and, for the types gguf-py can
quantize, random floats together with the bytes `gguf.quants.quantize` makes
of them. tests/test_quant.c checks doppler against these files bit for bit,
so the C test suite needs no Python. The file format is described in
tests/fixtures/quant/README.md.

Venv: python3 -m venv .venv-ref && .venv-ref/bin/pip install 'gguf==0.19.*' numpy
(the project's reference venv /work/venvs/ref has both).

Usage: gen_quant_fixtures.py [--out DIR] [--seed N] [--scale K]
  --scale multiplies the number of blocks (e.g. --scale 200 --out /tmp/big
  for a large one-off verification run: DOPPLER_QUANT_FIXTURES=/tmp/big
  build/test_quant then checks that directory instead of the committed one).
"""
import argparse
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf import quants

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]

# Byte offsets of the f16 scale fields (d, m / dmin) inside each block.
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}

# Types gguf-py can quantize (F32 is the identity and is left out).
QUANTIZABLE = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]

DEQ_MAGIC = b"DPQD"
QUANT_MAGIC = b"DPQQ"


def sane_f16(rng, n):
    """f16 scales with moderate magnitudes (2^-14 .. 2^1), random sign."""
    mag = np.exp2(rng.uniform(-14.0, 1.0, n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (sign * mag).astype(np.float16)


def extreme_f16(rng, n):
    """f16 scales from the edges of the format: subnormals, the largest
    finite values, zeros of both signs, the smallest normal, any finite."""
    out = np.empty(n, dtype=np.uint16)
    for i in range(n):
        k = rng.integers(0, 6)
        if k == 0:
            v = rng.integers(1, 0x400)                       # subnormal
        elif k == 1:
            v = 0x7BFF                                       # 65504
        elif k == 2:
            v = 0
        elif k == 3:
            v = 0x0400                                       # 2^-14
        elif k == 4:
            v = rng.integers(0x7800, 0x7C00)                 # 32768 .. 65504
        else:
            v = rng.integers(0, 0x7C00)                      # any finite
        out[i] = v | (0x8000 if rng.random() < 0.5 else 0)
    return out.view(np.float16)


def random_blocks(rng, name, n_blocks, scales):
    """Random packed bits with the f16 scale fields replaced by scales()."""
    bs, ts = GGML_QUANT_SIZES[T[name]]
    if name == "F32":
        x = (rng.standard_normal(n_blocks) * np.exp2(rng.uniform(-20, 20, n_blocks))).astype(np.float32)
        return x.view(np.uint8).reshape(n_blocks, ts)
    if name in ("F16", "BF16"):
        # every 16-bit pattern is a valid element: NaN, Inf and subnormals included
        return rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        raw[:, off:off + 2] = scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw


def nonfinite_blocks(name):
    """Blocks whose f16 scales are +Inf, -Inf and NaN (all other bytes 0x5a)."""
    bs, ts = GGML_QUANT_SIZES[T[name]]
    rows = []
    for v in (0x7C00, 0xFC00, 0x7E00):
        raw = np.full(ts, 0x5A, dtype=np.uint8)
        for off in F16_FIELDS[name]:
            raw[off:off + 2] = np.array([v], dtype=np.uint16).view(np.uint8)
        rows.append(raw)
    return np.stack(rows)


def write_deq(path, name, raw):
    qtype = T[name]
    expected = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    raw = raw.reshape(-1)
    with open(path, "wb") as f:
        f.write(DEQ_MAGIC + struct.pack("<III", int(qtype), expected.size, raw.size))
        f.write(raw.tobytes())
        f.write(expected.astype("<f4").tobytes())


def quant_inputs(rng, name, n_blocks):
    """Random floats for gguf.quants.quantize, with edge cases mixed in."""
    bs, _ = GGML_QUANT_SIZES[T[name]]
    if name in ("F16", "BF16"):
        n = n_blocks * 32
        # normals across magnitudes from below the f16 subnormals to beyond 65504
        x = rng.standard_normal(n) * np.exp2(rng.uniform(-30, 20, n))
        parts = [x.astype(np.float32)]
        # exact ties between neighbouring representable values (round to even)
        if name == "F16":
            h = rng.integers(0, 0x7BFF, n // 4, dtype=np.uint16)
            lo = h.view(np.float16).astype(np.float64)
            hi = (h + 1).view(np.float16).astype(np.float64)
            mid = ((lo + hi) / 2).astype(np.float32)
            mid *= np.where(rng.random(mid.size) < 0.5, -1, 1).astype(np.float32)
            parts.append(mid)
            edges = [65504.0, 65519.99, 65520.0, 65536.0, 2.0 ** -24, 2.0 ** -25,
                     np.nextafter(np.float32(2.0 ** -25), np.float32(1)), 1.5 * 2.0 ** -24,
                     2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 1e-10, 0.0, -0.0, np.inf, -np.inf, np.nan]
        else:
            b = rng.integers(0, 2 ** 32, n // 4, dtype=np.uint64).astype(np.uint32)
            mid = ((b & np.uint32(0xFFFF0000)) | np.uint32(0x8000)).view(np.float32)
            parts.append(mid[np.isfinite(mid)])
            parts.append(rng.integers(0, 2 ** 32, n // 4, dtype=np.uint64).astype(np.uint32).view(np.float32))
            edges = [3.4e38, -3.4e38, 1e-40, -1e-45, 0.0, -0.0, np.inf, -np.inf, np.nan]
        parts.append(np.array(edges, dtype=np.float32))
        x = np.concatenate(parts).astype(np.float32)
        return x
    blocks = rng.standard_normal((n_blocks, bs)) * np.exp2(rng.uniform(-10, 4, (n_blocks, 1)))
    blocks = blocks.astype(np.float32)
    blocks[0] = 0.0                                    # all zero
    blocks[1] = 0.75                                   # constant
    blocks[2] = -3.0                                   # constant negative
    blocks[3, 5] = 1000.0                              # one outlier
    blocks[4, 7] = -np.abs(blocks[4]).max()            # tie between +max and -max
    blocks[4, 9] = -blocks[4, 7]
    blocks[5] *= np.float32(1e-6)                      # d is an f16 subnormal
    blocks[6] = np.abs(blocks[6])                      # all positive
    blocks[7] = -np.abs(blocks[7])                     # all negative
    return blocks.reshape(-1)


def write_quant(path, name, x):
    qtype = T[name]
    q = quants.quantize(x, qtype)
    q = np.ascontiguousarray(q).view(np.uint8).reshape(-1)
    with open(path, "wb") as f:
        f.write(QUANT_MAGIC + struct.pack("<III", int(qtype), x.size, q.size))
        f.write(x.astype("<f4").tobytes())
        f.write(q.tobytes())


def main():
    np.seterr(all="ignore")  # Inf/NaN scales in the deqx_ files are intended
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "quant"))
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--scale", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for name in TYPES:
        bs, ts = GGML_QUANT_SIZES[T[name]]
        if bs == 1:
            n = 512
        elif bs == 32:
            n = 16
        else:
            n = 6
        n *= args.scale
        write_deq(os.path.join(args.out, f"deq_{name}.bin"), name, random_blocks(rng, name, n, sane_f16))
        if name in F16_FIELDS:
            raw = np.concatenate([random_blocks(rng, name, max(4, n // 2), extreme_f16), nonfinite_blocks(name)])
            write_deq(os.path.join(args.out, f"deqx_{name}.bin"), name, raw)
        if name in QUANTIZABLE:
            nb = 32 * args.scale if bs == 32 else 128 * args.scale
            write_quant(os.path.join(args.out, f"quant_{name}.bin"), name, quant_inputs(rng, name, nb))
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out) if f.endswith(".bin"))
    print(f"wrote fixtures to {args.out}: {total} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Model loading and decryption throughput, side by side with references.

    python tools/bench/bench_load.py [--size-mb 100] [--repeat 5]

Writes a portable model with SIZE MB of float32 weights to a temporary directory and
reports the median of REPEAT runs (page cache warm) for:
  * rknnlite load of the path (memory-mapped, checksums verified);
  * reading the same file into memory (the floor any non-mmap loader pays);
  * onnx.load of an ONNX model holding the same weights (if onnx is installed);
  * envelope decryption and encryption in MB/s (AES-256-GCM, 1 MiB chunks).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median_ms  # noqa: E402
from rknnlite.model import envelope  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.model.loader import load_model  # noqa: E402
from rknnlite.model.metadata import build_metadata  # noqa: E402
from rknnlite.model.portable import write_portable  # noqa: E402
from rknnlite.model.spec import TensorSpec  # noqa: E402


def big_model(size_mb: int):
    """A chain of MatMuls whose weights total ``size_mb`` MiB (1024x1024 float32 each = 4 MiB)."""
    n = max(1, size_mb // 4)
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(n)}
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(Node("MatMul", f"mm{i}", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    graph = Graph(nodes, ["x"], [prev], weights)
    meta = build_metadata([TensorSpec("x", (1, 1024), "float32")], [TensorSpec(prev, (1, 1024), "float32")])
    return write_portable(meta, graph), weights


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    data, weights = big_model(args.size_mb)
    mb = len(data) / 1e6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.rknn"
        path.write_bytes(data)
        rows.append(("rknnlite load (mmap + verify checksums)", median_ms(lambda: load_model(str(path)), args.repeat)))
        rows.append(("read whole file into memory (reference)", median_ms(path.read_bytes, args.repeat)))
        try:
            import onnx
            from onnx import helper, numpy_helper

            g = helper.make_graph([], "w", [], [], [numpy_helper.from_array(v, k) for k, v in weights.items()])
            onnx_path = Path(tmp) / "big.onnx"
            onnx.save(helper.make_model(g), str(onnx_path))
            rows.append(("onnx.load of the same weights (reference)", median_ms(lambda: onnx.load(str(onnx_path)), args.repeat)))
        except ImportError:
            rows.append(("onnx.load (onnx not installed)", float("nan")))

        key = envelope.generate_key()
        enc = envelope.encrypt(data, key)
        dec_ms = median_ms(lambda: envelope.decrypt(enc, key), args.repeat)
        enc_ms = median_ms(lambda: envelope.encrypt(data, key), args.repeat)
        enc_path = Path(tmp) / "big.enc.rknn"
        enc_path.write_bytes(enc)
        rows.append(("rknnlite load of the encrypted file (decrypt + verify)",
                     median_ms(lambda: load_model(str(enc_path), key=key), args.repeat)))

    print(f"model: {mb:.1f} MB portable container, {len(weights)} constants; median of {args.repeat} runs, "
          f"page cache warm; {os.cpu_count()} CPUs")
    print()
    print(machine())
    print("| operation | time (ms) |")
    print("|---|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.1f} |")
    print()
    print("| envelope (AES-256-GCM, 1 MiB chunks) | MB/s |")
    print("|---|---:|")
    print(f"| decrypt | {mb / (dec_ms / 1e3):.0f} |")
    print(f"| encrypt | {mb / (enc_ms / 1e3):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

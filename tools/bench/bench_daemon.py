#!/usr/bin/env python3
"""Requests/s and latency of the inference daemon on loopback, binary vs JSON tensors.

    python tools/bench/bench_daemon.py [--requests 6000] [--concurrency 16] [--clients 1]

Starts ``python -m rknnlite serve`` in a subprocess with two hand-built portable models:
  * ``tiny``: ``y = a + b`` on two 1x4 float32 inputs (the cost is the server's per-request
    overhead: HTTP, decoding, the hop to a worker thread, encoding);
  * ``mid``: Conv 16->32 3x3 + Relu on a 1x16x56x56 float32 input (200 KiB in, 400 KiB out,
    about 15 M MACs on the software backend).
For each model and encoding (binary tensor data extension, or JSON tensors) ``--clients``
client processes send ``--requests`` requests in total (a fifth for ``mid``) over
``--concurrency`` connections each (aiohttp, keep-alive, bodies encoded once in advance),
split over ``--rounds`` rounds that interleave the rows (so load from other processes hits
them alike); the table reports the median requests/s over rounds, the p50/p99 latency seen
by the clients, and the server process's CPU time per request
(user + system: on a shared machine the steadier number; 1e6 / it is the request rate
one core of server could sustain).  Every answer is checked (status 200).
Needs the daemon extra (aiohttp, prometheus-client).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.model.metadata import build_metadata  # noqa: E402
from rknnlite.model.portable import write_portable  # noqa: E402
from rknnlite.model.spec import TensorSpec  # noqa: E402


def tiny_model() -> bytes:
    graph = Graph([Node("Add", "add", ["a", "b"], ["y"])], ["a", "b"], ["y"], {})
    meta = build_metadata([TensorSpec("a", (1, 4), "float32"), TensorSpec("b", (1, 4), "float32")],
                          [TensorSpec("y", (1, 4), "float32")], float_dtype="float32")
    return write_portable(meta, graph)


def mid_model() -> bytes:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    graph = Graph([Node("Conv", "conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}),
                   Node("Relu", "relu", ["c"], ["y"])], ["x"], ["y"], {"w": w, "b": b})
    meta = build_metadata([TensorSpec("x", (1, 16, 56, 56), "float32", "NCHW")],
                          [TensorSpec("y", (1, 32, 56, 56), "float32", "NCHW")], float_dtype="float32")
    return write_portable(meta, graph)


def request_body(inputs, binary: bool):
    """(body, headers) of one inference request for ``{name: array}``."""
    if binary:
        doc = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                           "parameters": {"binary_data_size": a.nbytes}} for n, a in inputs.items()],
               "parameters": {"binary_data_output": True}}
        header = json.dumps(doc).encode()
        return header + b"".join(a.tobytes() for a in inputs.values()), \
            {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}
    doc = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
                      for n, a in inputs.items()]}
    return json.dumps(doc).encode(), {"Content-Type": "application/json"}


def client(url: str, body: bytes, headers: dict, n: int, concurrency: int, out) -> None:
    """One client process: ``n`` requests over ``concurrency`` connections; puts latencies (s)."""
    import aiohttp

    async def main():
        latencies = []
        errors = 0
        first_error = None
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def worker(k):
                nonlocal errors, first_error
                for _ in range(k):
                    t = time.perf_counter()
                    async with session.post(url, data=body, headers=headers) as r:
                        raw = await r.read()
                        if r.status != 200:
                            errors += 1
                            first_error = first_error or f"{r.status} {raw[:200]!r}"
                    latencies.append(time.perf_counter() - t)
            # warm the connections first
            await asyncio.gather(*[worker(2) for _ in range(concurrency)])
            latencies.clear()
            start = time.perf_counter()
            await asyncio.gather(*[worker(n // concurrency) for _ in range(concurrency)])
            out.put((latencies, errors, start, time.perf_counter(), first_error))

    asyncio.run(main())


def measure(url, body, headers, requests, concurrency, clients):
    q = mp.get_context("spawn").Queue()
    procs = [mp.get_context("spawn").Process(target=client, args=(url, body, headers, requests // clients,
                                                                    concurrency, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    latencies = np.concatenate([np.array(r[0]) for r in results])
    errors = sum(r[1] for r in results)
    for r in results:
        if r[4]:
            print(f"first error: {r[4]}", file=sys.stderr)
    span = max(r[3] for r in results) - min(r[2] for r in results)
    return len(latencies) / span, latencies, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6000, help="requests per tiny-model row (mid: a fifth)")
    ap.add_argument("--concurrency", type=int, default=16, help="connections per client process")
    ap.add_argument("--clients", type=int, default=1, help="client processes")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each row gets requests/rounds per round")
    ap.add_argument("--instances", type=int, default=1, help="contexts per model in the server")
    ap.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"], help="the server's event loop")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    models = {
        "tiny": (tiny_model(), {"a": rng.standard_normal((1, 4)).astype(np.float32),
                                "b": rng.standard_normal((1, 4)).astype(np.float32)}),
        "mid": (mid_model(), {"x": rng.standard_normal((1, 16, 56, 56)).astype(np.float32)}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, (data, _) in models.items():
            os.makedirs(os.path.join(tmp, name))
            Path(tmp, name, f"{name}.rknn").write_bytes(data)
            Path(tmp, name, "config.json").write_text(json.dumps({"instances": args.instances,
                                                                  "max_concurrency": 4096}))
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        server = subprocess.Popen([sys.executable, "-m", "rknnlite", "serve", "--model-repository", tmp,
                                   "--port", "0", "--loop", args.loop], stderr=subprocess.PIPE, text=True, env=env)
        try:
            import psutil

            server_cpu = psutil.Process(server.pid)
            for line in server.stderr:
                if " ERROR " in line:
                    sys.stderr.write(line)
                m = re.search(r"serving .* on (http://\S+)", line)
                if m:
                    base = m.group(1)
                    break
            else:
                raise SystemExit("the server did not start")
            # keep reading the server's log (a full pipe would stall it) and show its errors
            threading.Thread(target=lambda: [sys.stderr.write(x) for x in server.stderr if " ERROR " in x],
                             daemon=True).start()
            for name in models:
                with urllib.request.urlopen(f"{base}/v2/models/{name}") as r:
                    meta = json.loads(r.read())
                if meta["state"] != "READY":
                    raise SystemExit(f"model {name} is not ready: {meta.get('reason')}")
            for name, (_, inputs) in models.items():  # warm-up: first-use costs of both paths
                for binary in (True, False):
                    body, headers = request_body(inputs, binary)
                    measure(f"{base}/v2/models/{name}/infer", body, headers, args.concurrency * 4, args.concurrency, 1)
            print(f"loopback, {args.clients} client process(es) x {args.concurrency} connections, "
                  f"{args.instances} context(s) per model, --loop {args.loop}; {os.cpu_count()} CPUs; "
                  f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
            # rows interleaved over --rounds rounds, so load from other processes hits them alike
            rows = [(name, binary) for name in models for binary in (True, False)]
            got = {row: {"rps": [], "lat": [], "cpu": [], "errors": 0, "n": 0} for row in rows}
            for _ in range(args.rounds):
                for name, binary in rows:
                    inputs = models[name][1]
                    n = args.requests if name == "tiny" else args.requests // 5
                    n = max(args.concurrency * args.clients, n // args.rounds)
                    body, headers = request_body(inputs, binary)
                    cpu0 = server_cpu.cpu_times()
                    rps, latencies, errors = measure(f"{base}/v2/models/{name}/infer", body, headers, n,
                                                     args.concurrency, args.clients)
                    cpu1 = server_cpu.cpu_times()
                    sent = n + 2 * args.concurrency * args.clients  # and the clients' warm-up requests
                    row = got[(name, binary)]
                    row["rps"].append(rps)
                    row["lat"].append(latencies)
                    row["cpu"].append(((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / sent * 1e6)
                    row["errors"] += errors
                    row["n"] += len(latencies)
            print("| model | tensors | requests | req/s | p50 ms | p99 ms | server CPU µs/req | errors |")
            print("|---|---|---:|---:|---:|---:|---:|---:|")
            for name, binary in rows:
                row = got[(name, binary)]
                lat = np.concatenate(row["lat"]) * 1e3
                print(f"| {name} | {'binary' if binary else 'JSON'} | {row['n']} | {np.median(row['rps']):,.0f} | "
                      f"{np.percentile(lat, 50):.2f} | {np.percentile(lat, 99):.2f} | "
                      f"{np.median(row['cpu']):,.0f} | {row['errors']} |", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())

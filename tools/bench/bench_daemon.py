#!/usr/bin/env python3
"""Requests/s and latency of the inference daemon on loopback, binary vs JSON tensors.

    python tools/bench/bench_daemon.py [--requests 6000] [--concurrency 16] [--clients 1]

Starts ``python -m rknnlite serve`` in a subprocess with two hand-built portable models:
  * ``tiny``: ``y = a + b`` on two 1x4 float32 inputs (the cost is the server's per-request
    overhead: HTTP, decoding, checking, running, encoding);
  * ``mid``: Conv 16->32 3x3 + Relu on a 1x16x56x56 float32 input (200 KiB in, 400 KiB out,
    about 15 M MACs on the software backend).
For each model and encoding (binary tensor data extension, or JSON tensors) ``--clients``
client processes send ``--requests`` requests in total (a fifth for ``mid``) over
``--concurrency`` keep-alive connections each, one request in flight per connection,
split over ``--rounds`` rounds that interleave the rows (so load from other processes hits
them alike).  The client is a raw-socket HTTP/1.1 loop on epoll with the request bytes
built once: it costs a fraction of the server's CPU per request (the table shows both),
so it is not what limits the rate.

The table reports the median (and lowest) requests/s over rounds, the p50/p99 latency seen
by the clients, the server process's CPU time per request (user + system, psutil; on a
shared machine the steadier number: 1e6 / it is the request rate one free core of server
sustains) and the client's.  Every answer is checked (status 200); a run that gets no
answer for 60 s stops.  ``--server-tree`` runs the server from another checkout (A/B
comparisons of two revisions under the same load); ``--profile`` runs it under cProfile.
Needs the daemon extra (aiohttp, prometheus-client).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.model.metadata import build_metadata  # noqa: E402
from rknnlite.model.portable import write_portable  # noqa: E402
from rknnlite.model.spec import TensorSpec  # noqa: E402

#: Seconds without any answer after which a run is abandoned (keeps the benchmark bounded).
_STALL_SECONDS = 60


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


def _request_bytes(url: str, body: bytes, headers: dict) -> Tuple[str, int, bytes]:
    """(host, port, the whole HTTP/1.1 request) for a POST of ``body`` to ``url``."""
    parts = urllib.parse.urlsplit(url)
    lines = [f"POST {parts.path} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return parts.hostname, parts.port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def client(url: str, body: bytes, headers: dict, n: int, concurrency: int, out) -> None:
    """One client process: ``n`` requests over ``concurrency`` keep-alive connections, one request
    in flight per connection; puts (latencies s, errors, start, end, first error, CPU s).

    A raw-socket HTTP/1.1 client on epoll, with the request bytes built once: it costs a
    small fraction of the server's CPU per request, so the client is not what is measured
    (an aiohttp client costs about as much CPU per request as the server).
    """
    host, port, request = _request_bytes(url, body, headers)
    ep = select.epoll()
    conns = {}
    for _ in range(concurrency):
        s = socket.create_connection((host, port), timeout=_STALL_SECONDS)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ep.register(s.fileno(), select.EPOLLIN)
        conns[s.fileno()] = [s, bytearray(), 0.0, -1, 0]  # socket, buffer, sent at, response length, status
    latencies: List[float] = []
    errors = 0
    first_error = None

    def run(count: int) -> None:
        nonlocal errors, first_error
        left = count
        for c in conns.values():
            if left:
                c[2] = time.perf_counter()
                c[0].sendall(request)
                left -= 1
        done = 0
        while done < count:
            events = ep.poll(_STALL_SECONDS)
            if not events:
                raise SystemExit(f"no answer for {_STALL_SECONDS} s")
            for fd, _ in events:
                c = conns[fd]
                data = c[0].recv(1 << 20)
                if not data:
                    raise SystemExit("the server closed a connection")
                buf = c[1]
                buf += data
                while True:
                    if c[3] < 0:
                        end = buf.find(b"\r\n\r\n")
                        if end < 0:
                            break
                        head = bytes(buf[:end + 2]).lower()
                        at = head.find(b"\r\ncontent-length:")
                        if at < 0:
                            raise SystemExit(f"an answer without Content-Length: {head[:200]!r}")
                        c[3] = end + 4 + int(head[at + 17:head.index(b"\r\n", at + 2)])
                        c[4] = int(head[9:12])
                    if len(buf) < c[3]:
                        break
                    latencies.append(time.perf_counter() - c[2])
                    if c[4] != 200:
                        errors += 1
                        first_error = first_error or bytes(buf[:c[3]][-300:])
                    del buf[:c[3]]
                    c[3] = -1
                    done += 1
                    if left:
                        left -= 1
                        c[2] = time.perf_counter()
                        c[0].sendall(request)

    run(2 * concurrency)  # warm the connections (and the server's per-connection state)
    latencies.clear()
    cpu = time.process_time()
    start = time.perf_counter()
    run(n)
    out.put((latencies, errors, start, time.perf_counter(), first_error, time.process_time() - cpu))
    for c in conns.values():
        c[0].close()
    ep.close()


def measure(url, body, headers, requests, concurrency, clients):
    """(requests/s, latencies s, errors, client CPU s) of ``requests`` over ``clients`` processes."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=client, args=(url, body, headers, requests // clients, concurrency, q))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = []
    while len(results) < len(procs):
        try:
            results.append(q.get(timeout=1))
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise SystemExit("a client process failed (see its traceback above)") from None
    for p in procs:
        p.join()
    latencies = np.concatenate([np.array(r[0]) for r in results])
    errors = sum(r[1] for r in results)
    for r in results:
        if r[4]:
            print(f"first error: {r[4]}", file=sys.stderr)
    span = max(r[3] for r in results) - min(r[2] for r in results)
    return len(latencies) / span, latencies, errors, sum(r[5] for r in results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6000, help="requests per tiny-model row (mid: a fifth)")
    ap.add_argument("--concurrency", type=int, default=16, help="connections per client process")
    ap.add_argument("--clients", type=int, default=1, help="client processes")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each row gets requests/rounds per round")
    ap.add_argument("--instances", type=int, default=1, help="contexts per model in the server")
    ap.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"], help="the server's event loop")
    ap.add_argument("--models", default="tiny,mid", help="comma-separated rows to run: tiny, mid")
    ap.add_argument("--tensors", default="binary,json", help="comma-separated encodings to run: binary, json")
    ap.add_argument("--server-tree", type=Path, default=REPO,
                    help="checkout whose rknnlite the server runs (A/B comparisons of two revisions)")
    ap.add_argument("--profile", metavar="FILE", help="run the server under cProfile, stats written to FILE at exit")
    args = ap.parse_args()
    names = [m for m in args.models.split(",") if m]
    encodings = [t for t in args.tensors.split(",") if t]
    if not set(names) <= {"tiny", "mid"} or not set(encodings) <= {"binary", "json"} or not names or not encodings:
        ap.error("--models takes tiny and/or mid, --tensors binary and/or json")
    rng = np.random.default_rng(1)
    models = {
        "tiny": (tiny_model(), {"a": rng.standard_normal((1, 4)).astype(np.float32),
                                "b": rng.standard_normal((1, 4)).astype(np.float32)}),
        "mid": (mid_model(), {"x": rng.standard_normal((1, 16, 56, 56)).astype(np.float32)}),
    }
    models = {name: models[name] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (data, _) in models.items():
            os.makedirs(os.path.join(tmp, name))
            Path(tmp, name, f"{name}.rknn").write_bytes(data)
            Path(tmp, name, "config.json").write_text(json.dumps({"instances": args.instances,
                                                                  "max_concurrency": 4096}))
        env = dict(os.environ,
                   PYTHONPATH=str(args.server_tree.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        profile = ["-m", "cProfile", "-o", os.path.abspath(args.profile)] if args.profile else []
        server = subprocess.Popen([sys.executable, *profile, "-m", "rknnlite", "serve", "--model-repository", tmp,
                                   "--port", "0", "--loop", args.loop], stderr=subprocess.PIPE, text=True, env=env,
                                  cwd=tmp)
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
            load_before = os.getloadavg()
            # rows interleaved over --rounds rounds, so load from other processes hits them alike
            rows = [(name, binary) for name in models for binary in (True, False)
                    if ("binary" if binary else "json") in encodings]
            got = {row: {"rps": [], "lat": [], "cpu": [], "client": [], "errors": 0, "n": 0} for row in rows}
            for _ in range(args.rounds):
                for name, binary in rows:
                    inputs = models[name][1]
                    n = args.requests if name == "tiny" else args.requests // 5
                    n = max(args.concurrency * args.clients, n // args.rounds)
                    body, headers = request_body(inputs, binary)
                    cpu0 = server_cpu.cpu_times()
                    rps, latencies, errors, client_cpu = measure(f"{base}/v2/models/{name}/infer", body, headers, n,
                                                                 args.concurrency, args.clients)
                    cpu1 = server_cpu.cpu_times()
                    sent = len(latencies) + 2 * args.concurrency * args.clients  # and the clients' warm-up requests
                    row = got[(name, binary)]
                    row["rps"].append(rps)
                    row["lat"].append(latencies)
                    row["cpu"].append(((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / sent * 1e6)
                    row["client"].append(client_cpu / len(latencies) * 1e6)
                    row["errors"] += errors
                    row["n"] += len(latencies)
            print(f"loopback, {args.clients} raw-socket client process(es) x {args.concurrency} connections, "
                  f"{args.instances} context(s) per model, --loop {args.loop}, {args.rounds} rounds; "
                  f"{os.cpu_count()} CPUs; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after\n")
            print(machine())
            print("| model | tensors | requests | req/s median (min) | p50 ms | p99 ms "
                  "| server CPU µs/req median (min) | client CPU µs/req | errors |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
            for name, binary in rows:
                row = got[(name, binary)]
                lat = np.concatenate(row["lat"]) * 1e3
                print(f"| {name} | {'binary' if binary else 'JSON'} | {row['n']} | "
                      f"{np.median(row['rps']):,.0f} ({min(row['rps']):,.0f}) | "
                      f"{np.percentile(lat, 50):.2f} | {np.percentile(lat, 99):.2f} | "
                      f"{np.median(row['cpu']):,.0f} ({min(row['cpu']):,.0f}) | {np.median(row['client']):,.0f} | "
                      f"{row['errors']} |", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())

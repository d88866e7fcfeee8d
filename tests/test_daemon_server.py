"""The inference daemon over HTTP: tritonclient.http against rknnlite.daemon.Server on loopback,
protocol errors, auth, limits, load/unload, metrics, and `rknnlite serve` signals in a subprocess."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

from rknnlite import Context, InvalidParamError  # noqa: E402
from rknnlite.daemon import Server  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOKEN = "s3cret-token"


def _write_model(root: Path, name: str, data: bytes, config=None) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / f"{name}.rknn").write_bytes(data)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def repo(tmp_path_factory, context_models, conv_relu_model) -> Path:
    root = tmp_path_factory.mktemp("daemon_repo")
    _write_model(root, "add", context_models["add"], {"instances": 2})
    _write_model(root, "conv", context_models["conv_fp16"])
    _write_model(root, "types", context_models["int64_bool"])
    _write_model(root, "dyn", context_models["dyn_add"])
    # a 4-batch model: gathered until 4 rows wait (or 10 s; the test sends 4 at once)
    _write_model(root, "batched", conv_relu_model(batch=4, channels=2, size=4),
                 {"dynamic_batching": {"max_batch_size": 4, "max_queue_delay_us": 10_000_000}})
    # one request in flight at most; a lone request waits 3 s for a partner that never comes
    _write_model(root, "slow", conv_relu_model(batch=2, channels=2, size=4),
                 {"dynamic_batching": {"max_batch_size": 2, "max_queue_delay_us": 3_000_000}, "max_concurrency": 1})
    folder = root / "broken"
    folder.mkdir()
    (folder / "broken.rknn").write_bytes(b"RKNN but not really a model")
    return root


@pytest.fixture(scope="module")
def server(repo):
    with Server(str(repo), max_body_bytes=1 << 20) as s:
        yield s


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}", concurrency=4)
    yield c
    c.close()


def _http(url, method="GET", body=None, headers=None):
    """(status, headers, body) of one request; no exception on 4xx/5xx."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _error_of(status_headers_body):
    status, headers, body = status_headers_body
    assert headers.get("Content-Type", "").startswith("application/json")
    doc = json.loads(body)
    assert set(doc) == {"error"} and isinstance(doc["error"], str) and doc["error"]
    return status, doc["error"]


def _infer_body(inputs, outputs=None) -> bytes:
    doc = {"inputs": inputs}
    if outputs is not None:
        doc["outputs"] = outputs
    return json.dumps(doc).encode()


# -- metadata and health ---------------------------------------------------------------------


def test_health_and_server_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "rknnlite" and "binary_tensor_data" in meta["extensions"]
    assert "model_repository" in meta["extensions"]


def test_model_metadata_ready_and_config(client):
    meta = client.get_model_metadata("add")
    assert meta["name"] == "add" and meta["versions"] == ["1"] and meta["state"] == "READY"
    assert meta["inputs"] == [{"name": "a", "datatype": "FP32", "shape": [1, 4]},
                              {"name": "b", "datatype": "FP32", "shape": [1, 4]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [1, 4]}]
    assert client.get_model_metadata("add", "1") == meta
    assert client.is_model_ready("add") and client.is_model_ready("add", "1")
    assert not client.is_model_ready("add", "7") and not client.is_model_ready("nope")
    types = client.get_model_metadata("types")
    assert [t["datatype"] for t in types["inputs"]] == ["INT64", "BOOL"]
    assert client.get_model_metadata("batched")["inputs"][0]["shape"] == [-1, 2, 4, 4]
    config = client.get_model_config("batched")
    assert config["max_batch_size"] == 4 and config["input"][0]["dims"] == [2, 4, 4]


def test_broken_model_is_unavailable_with_its_reason(client, server):
    meta = client.get_model_metadata("broken")
    assert meta["state"] == "UNAVAILABLE" and meta["reason"]
    assert not client.is_model_ready("broken")
    with pytest.raises(InferenceServerException, match="not ready"):
        client.infer("broken", [_input("x", np.zeros(1, np.float32))])
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["broken"]["state"] == "UNAVAILABLE" and index["add"]["state"] == "READY"


# -- inference -------------------------------------------------------------------------------


def _input(name, array, binary=True):
    dt = {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "uint8": "UINT8", "float16": "FP16"}[array.dtype.name]
    i = httpclient.InferInput(name, list(array.shape), dt)
    i.set_data_from_numpy(array, binary_data=binary)
    return i


@pytest.mark.parametrize("binary_in, binary_out", [(True, True), (False, False), (True, False), (False, True)])
def test_infer_matches_context_run(client, context_models, binary_in, binary_out):
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 255, (1, 8, 8, 3)).astype(np.float32)  # the image input's own layout: NHWC
    result = client.infer("conv", [_input("x", x, binary_in)],
                          outputs=[httpclient.InferRequestedOutput("y", binary_data=binary_out)], request_id="r7")
    assert result.get_response()["id"] == "r7"
    with Context(context_models["conv_fp16"]) as ctx:
        want = ctx.run([x])[0]
    got = result.as_numpy("y")
    if binary_out:
        np.testing.assert_array_equal(got, want)
    else:  # JSON carries float32 values as decimal text
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_large_json_tensors_are_decoded_and_encoded_off_the_loop(repo, conv_relu_model):
    # 16384 input elements (~300 KiB of JSON) and 32768 output elements: both over the
    # thresholds above which the server decodes/encodes JSON in its executor
    data = conv_relu_model(channels=16, size=32)
    x = np.random.default_rng(2).standard_normal((1, 16, 32, 32)).astype(np.float32)
    with Server(models={"big": _store(repo, "big.rknn", data)}) as s:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{s.port}")
        r = c.infer("big", [_input("x", x, binary=False)], outputs=[httpclient.InferRequestedOutput("y", False)])
        c.close()
    with Context(data) as ctx:
        want = ctx.run([x])[0]
    np.testing.assert_allclose(r.as_numpy("y"), want, rtol=1e-6)


def _store(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


def test_infer_two_inputs_all_outputs_default_binary(client):
    a = np.array([[1, 2, 3, 4]], np.float32)
    b = np.array([[10, 20, 30, 40]], np.float32)
    result = client.infer("add", [_input("a", a), _input("b", b, binary=False)])
    out = result.get_response()["outputs"][0]
    assert out["parameters"] == {"binary_data_size": 16}  # no outputs named: all binary
    np.testing.assert_array_equal(result.as_numpy("y"), a + b)


def test_infer_int64_and_bool(client):
    i = np.arange(6, dtype=np.int64).reshape(2, 3) - 3
    m = np.array([True, False, False, True])
    for binary in (True, False):
        outputs = [httpclient.InferRequestedOutput("j", binary), httpclient.InferRequestedOutput("n", binary)]
        r = client.infer("types", [_input("i", i, binary), _input("m", m, binary)], outputs=outputs)
        np.testing.assert_array_equal(r.as_numpy("j"), i)
        np.testing.assert_array_equal(r.as_numpy("n"), ~m)


def test_uint8_and_fp16_inputs_are_accepted_for_float_models(client, context_models):
    x = np.arange(192, dtype=np.uint8).reshape(1, 8, 8, 3)
    with Context(context_models["conv_fp16"]) as ctx:
        want = ctx.run([x])[0]
    np.testing.assert_array_equal(client.infer("conv", [_input("x", x)]).as_numpy("y"), want)
    r = client.infer("conv", [_input("x", x.astype(np.float16))])
    np.testing.assert_array_equal(r.as_numpy("y"), want)


def test_dynamic_shape_model(client):
    a = np.ones((1, 8), np.float32)
    r = client.infer("dyn", [_input("a", a), _input("b", 2 * a)])
    np.testing.assert_array_equal(r.as_numpy("y"), 3 * a)
    assert client.get_model_metadata("dyn")["inputs"][0]["shape"] == [1, -1]
    with pytest.raises(InferenceServerException, match="shape sets"):
        client.infer("dyn", [_input("a", np.ones((1, 5), np.float32)), _input("b", np.ones((1, 5), np.float32))])


def test_dynamic_batching_gathers_concurrent_requests(server, conv_relu_model):
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 2, 4, 4)).astype(np.float32) for _ in range(3)] + \
         [rng.standard_normal((1, 2, 4, 4)).astype(np.float32)]
    with ThreadPoolExecutor(4) as pool:
        def one(x):
            c = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
            try:
                return c.infer("batched", [_input("x", x)]).as_numpy("y")
            finally:
                c.close()
        got = list(pool.map(one, xs))
    with Context(conv_relu_model(batch=4, channels=2, size=4)) as ctx:
        want = ctx.run([np.concatenate(xs)])[0]
    for k in range(4):
        np.testing.assert_allclose(got[k], want[k:k + 1], rtol=1e-5, atol=1e-6)
    status, _, body = _http(server.url + "/metrics")
    assert re.search(rb'rknnlite_batch_size_count\{model="batched"\} [1-9]', body)
    # with batching, a request carries 1..max_batch_size rows
    status, error = _error_of(_http(server.url + "/v2/models/batched/infer", "POST", _infer_body(
        [{"name": "x", "shape": [5, 2, 4, 4], "datatype": "FP32", "data": [0.0] * 160}])))
    assert status == 400 and "5 rows" in error


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, body, headers, status, fragment", [
    ("/v2/models/add/infer", b"{nope", {}, 400, "malformed JSON"),
    ("/v2/models/add/infer", _infer_body([{"name": "a", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 4]},
                                          {"name": "b", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]),
     {}, 400, "datatype INT64"),
    ("/v2/models/add/infer", _infer_body([{"name": "a", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]},
                                          {"name": "b", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]),
     {}, 400, "shape [2, 2]"),
    ("/v2/models/add/infer", _infer_body([{"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]}]),
     {}, 400, "3 data elements"),
    ("/v2/models/add/infer", _infer_body([{"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]),
     {}, 400, "missing input"),
    ("/v2/models/add/infer", _infer_body([{"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                                          {"name": "b", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}],
                                         [{"name": "zz"}]), {}, 400, "unknown output 'zz'"),
    ("/v2/models/add/infer", b'{"inputs": []}', {"Inference-Header-Content-Length": "abc"}, 400, "must be an integer"),
    ("/v2/models/nope/infer", b"{}", {}, 404, "unknown model 'nope'"),
    ("/v2/models/add/versions/2/infer", b"{}", {}, 404, "unknown version '2'"),
    ("/v2/models/nope", None, {}, 404, "unknown model"),
    ("/v2/models/add/versions/9", None, {}, 404, "unknown version"),
    ("/v2/nothing/here", None, {}, 404, "Not Found"),
    ("/v2/repository/models/nope/load", b"", {}, 404, "unknown model 'nope'"),
    ("/v2/repository/models/nope/unload", b"", {}, 404, "not loaded"),
    ("/v2/repository/index", b"[", {}, 400, "malformed JSON"),
])
def test_errors_answer_4xx_with_the_protocol_body(server, path, body, headers, status, fragment):
    got_status, error = _error_of(_http(server.url + path, "POST" if body is not None else "GET", body, headers))
    assert got_status == status
    assert fragment in error


def test_wrong_method_is_405_with_error_body(server):
    status, error = _error_of(_http(server.url + "/v2/models/add/infer"))
    assert status == 405


def test_body_limit(server):
    big = b'{"inputs": [' + b" " * (2 << 20) + b"]}"
    status, error = _error_of(_http(server.url + "/v2/models/add/infer", "POST", big))
    assert status == 413 and "too large" in error
    assert _http(server.url + "/v2/health/live")[0] == 200  # the server is fine afterwards


def test_saturated_model_answers_503_with_retry_after(server):
    x = np.zeros((1, 2, 4, 4), np.float32)
    body = _infer_body([{"name": "x", "shape": [1, 2, 4, 4], "datatype": "FP32", "data": x.ravel().tolist()}])
    url = server.url + "/v2/models/slow/infer"
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_http, url, "POST", body)
        # wait until the first request is admitted (it then waits in the batcher for 3 s)
        for _ in range(2000):
            if re.search(rb'rknnlite_queue_depth\{model="slow"\} 1\.0', _http(server.url + "/metrics")[2]):
                break
            time.sleep(0.005)
        else:
            pytest.fail("the first request was never admitted")
        status, headers, raw = _http(url, "POST", body)
        assert status == 503 and headers.get("Retry-After") == "1"
        assert "saturated" in json.loads(raw)["error"]
        assert first.result()[0] == 200


# -- auth --------------------------------------------------------------------------------------


def test_bearer_token_on_every_endpoint_but_health(repo):
    with Server(str(repo), token=TOKEN) as s:
        assert _http(s.url + "/v2/health/live")[0] == 200
        assert _http(s.url + "/v2/health/ready")[0] == 200
        for path, method in (("/v2", "GET"), ("/v2/models/add", "GET"), ("/metrics", "GET"),
                             ("/v2/models/add/infer", "POST"), ("/v2/repository/index", "POST")):
            status, headers, body = _http(s.url + path, method, b"{}" if method == "POST" else None)
            assert status == 401 and "bearer" in json.loads(body)["error"]
            assert headers.get("WWW-Authenticate", "").startswith("Bearer")
            assert _http(s.url + path, method, b"{}" if method == "POST" else None,
                         {"Authorization": "Bearer wrong"})[0] == 401
        c = httpclient.InferenceServerClient(f"127.0.0.1:{s.port}")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with pytest.raises(InferenceServerException, match="bearer"):
            c.get_model_metadata("add")
        assert c.get_model_metadata("add", headers=auth)["name"] == "add"
        a = np.ones((1, 4), np.float32)
        r = c.infer("add", [_input("a", a), _input("b", a)], headers=auth)
        np.testing.assert_array_equal(r.as_numpy("y"), 2 * a)
        c.close()


# -- repository API, metrics -------------------------------------------------------------------


def test_unload_and_load_through_the_api(client):
    a = np.ones((1, 4), np.float32)
    client.unload_model("add")
    assert not client.is_model_ready("add")
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.infer("add", [_input("a", a), _input("b", a)])
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["add"]["state"] == "UNAVAILABLE"
    client.load_model("add")
    assert client.is_model_ready("add")
    np.testing.assert_array_equal(client.infer("add", [_input("a", a), _input("b", a)]).as_numpy("y"), 2 * a)
    with pytest.raises(InferenceServerException, match="failed to load model 'broken'"):
        client.load_model("broken")


def test_metrics_in_a_private_registry(server, client):
    import prometheus_client

    a = np.ones((1, 4), np.float32)
    client.infer("add", [_input("a", a), _input("b", a)])
    _http(server.url + "/v2/models/add/infer", "POST", b"{bad")
    status, headers, body = _http(server.url + "/metrics")
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert re.search(r'rknnlite_requests_total\{endpoint="infer",model="add",status="200"\} [1-9]', text)
    assert re.search(r'rknnlite_requests_total\{endpoint="infer",model="add",status="400"\} [1-9]', text)
    assert re.search(r'rknnlite_request_duration_seconds_count\{endpoint="infer",model="add"\} [1-9]', text)
    assert re.search(r'rknnlite_inference_duration_seconds_count\{model="add"\} [1-9]', text)
    assert re.search(r'rknnlite_errors_total\{kind="client",model="add"\} [1-9]', text)
    assert 'rknnlite_model_ready{model="broken"} 0.0' in text
    assert re.search(r"rknnlite_process_resident_memory_bytes [1-9]", text)
    assert "rknnlite_process_cpu_seconds_total" in text
    assert "rknnlite" not in prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()


def test_reload_picks_up_new_and_changed_models(tmp_path, context_models):
    _write_model(tmp_path, "one", context_models["add"])
    with Server(str(tmp_path)) as s:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{s.port}")
        _write_model(tmp_path, "two", context_models["add"])
        (tmp_path / "one" / "config.json").write_text(json.dumps({"version": "5"}))
        assert sorted(s.reload()) == ["one", "two"]
        assert c.is_model_ready("two") and c.get_model_metadata("one")["versions"] == ["5"]
        c.close()


def test_server_start_failure_is_raised(context_models, tmp_path):
    with Server(models={"a": str(tmp_path / "x.rknn")}) as s:  # a missing file: the model is unavailable
        status, _, body = _http(s.url + "/v2/models/a")
        assert status == 200 and "not a file" in json.loads(body)["reason"]
        with pytest.raises(OSError):
            Server(models={}, port=s.port).start()  # port taken



@pytest.mark.parametrize("options, fragment", [
    (dict(port=65536), "port (--port) must be an int in 0..65535 (0: a free one), got 65536"),
    (dict(port=-1), "got -1"),
    (dict(max_body_bytes=0), "max_body_bytes (--max-body-bytes) must be an int >= 1, got 0"),
    (dict(drain_timeout=float("inf")), "drain_timeout (--drain-timeout) must be a number of seconds >= 0, got inf"),
])
def test_server_options_out_of_range_are_refused_at_construction(options, fragment):
    with pytest.raises(InvalidParamError) as e:
        Server(models={}, **options)
    assert fragment in e.value.message


# -- load test ---------------------------------------------------------------------------------


def test_loopback_load_zero_5xx_and_flat_rss(server):
    import asyncio

    import aiohttp
    import psutil

    a = np.ones((1, 4), np.float32)
    header = json.dumps({"inputs": [{"name": n, "shape": [1, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}} for n in ("a", "b")],
                         "parameters": {"binary_data_output": True}}).encode()
    body = header + a.tobytes() * 2
    headers = {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}
    statuses: dict = {}

    async def load(n, concurrency):
        async with aiohttp.ClientSession() as session:
            async def worker():
                for _ in range(n // concurrency):
                    async with session.post(server.url + "/v2/models/add/infer", data=body, headers=headers) as r:
                        raw = await r.read()
                        statuses[r.status] = statuses.get(r.status, 0) + 1
                        if r.status == 200:
                            assert raw.endswith(np.full((1, 4), 2, np.float32).tobytes())
            await asyncio.gather(*[worker() for _ in range(concurrency)])

    me = psutil.Process()
    asyncio.run(load(512, 16))  # warm-up: pools, caches, first-use allocations
    rss0 = me.memory_info().rss
    asyncio.run(load(2000, 16))
    growth = me.memory_info().rss - rss0
    assert statuses == {200: 2512}
    assert growth < 16 << 20, f"RSS grew by {growth / 2**20:.1f} MiB over 2000 requests"


# -- the `rknnlite serve` command: signals -----------------------------------------------------


class _Daemon:
    """`python -m rknnlite serve ...` in a subprocess; its stderr lines are collected."""

    def __init__(self, *args, env=None):
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "rknnlite", "serve", "--port", "0", *args],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.log: list = []
        threading.Thread(target=self._read, daemon=True).start()
        line = self.wait_for("serving ")
        self.url = re.search(r"(http://\S+)", line).group(1)

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put("")

    def wait_for(self, text, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line == "":
                break
            if text in line:
                return line
        raise AssertionError(f"{text!r} not logged; log:\n{''.join(self.log)}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def test_serve_sighup_reloads_and_sigterm_drains(tmp_path, context_models, conv_relu_model):
    _write_model(tmp_path, "add", context_models["add"])
    _write_model(tmp_path, "slow", conv_relu_model(batch=2, channels=2, size=4),
                 {"dynamic_batching": {"max_batch_size": 2, "max_queue_delay_us": 3_000_000}})
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # systemd's notify socket, played here
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(120)
    d = _Daemon("--model-repository", str(tmp_path), "--drain-timeout", "60", "--log-level", "debug",
                env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    try:
        assert notify.recv(256) == b"READY=1"
        assert _http(d.url + "/v2/models/late/ready")[0] == 404
        _write_model(tmp_path, "late", context_models["add"])
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for("reloaded the repository")
        assert (notify.recv(256), notify.recv(256)) == (b"RELOADING=1", b"READY=1")
        assert _http(d.url + "/v2/models/late/ready")[0] == 200

        x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
        body = _infer_body([{"name": "x", "shape": [1, 2, 4, 4], "datatype": "FP32", "data": x.ravel().tolist()}])
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(_http, d.url + "/v2/models/slow/infer", "POST", body)
            for _ in range(2000):  # until the request waits in the batcher
                if b'rknnlite_queue_depth{model="slow"} 1.0' in _http(d.url + "/metrics")[2]:
                    break
                time.sleep(0.005)
            else:
                pytest.fail("the request never reached the batcher")
            d.proc.send_signal(signal.SIGTERM)
            d.wait_for("stopping")
            assert notify.recv(256) == b"STOPPING=1"
            with pytest.raises(OSError):  # no new connections while draining (or after exit)
                urllib.request.urlopen(d.url + "/v2/health/live", timeout=10)
            try:
                status, _, raw = pending.result()
            except OSError as e:  # it failed once in CI (no response in 60 s); keep what the daemon said
                d.proc.kill()
                time.sleep(0.5)
                pytest.fail(f"the request in flight got no response: {e!r}; the daemon's log:\n{''.join(d.log)}")
        assert status == 200  # the request in flight finished
        _assert_slow_output(raw, x, conv_relu_model)
        assert d.proc.wait(timeout=120) == 0
        d.wait_for("stopped")
    finally:
        d.stop()
        notify.close()


def test_stop_runs_a_request_waiting_for_its_batch_without_waiting_out_the_delay(tmp_path, conv_relu_model):
    # the longest queue delay a config takes (10 s) against a 5 s drain: without the flush the
    # request in flight is cancelled when the drain times out
    _write_model(tmp_path, "slow", conv_relu_model(batch=2, channels=2, size=4),
                 {"dynamic_batching": {"max_batch_size": 2, "max_queue_delay_us": 10_000_000}})
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
    body = _infer_body([{"name": "x", "shape": [1, 2, 4, 4], "datatype": "FP32", "data": x.ravel().tolist()}])
    s = Server(str(tmp_path), drain_timeout=5).start()
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(_http, s.url + "/v2/models/slow/infer", "POST", body)
            for _ in range(4000):  # until the request waits in the batcher
                if s.call(_batcher_depth(s, "slow")) == 1:
                    break
                time.sleep(0.005)
            else:
                pytest.fail("the request never reached the batcher")
            s.stop()
            status, _, raw = pending.result()
    finally:
        s.stop()
    assert status == 200
    _assert_slow_output(raw, x, conv_relu_model)


async def _batcher_depth(server: Server, name: str) -> int:
    return server.manager.get(name)._batcher.depth


def _assert_slow_output(raw: bytes, x: np.ndarray, conv_relu_model) -> None:
    """``raw`` (a JSON response of the 2-batch "slow" model to the one row ``x``) holds the
    model's output for ``x`` batched with a zero row."""
    with Context(conv_relu_model(batch=2, channels=2, size=4)) as ctx:
        want = ctx.run([np.concatenate([x, np.zeros_like(x)])])[0][:1]
    np.testing.assert_allclose(np.array(json.loads(raw)["outputs"][0]["data"], np.float32).reshape(want.shape),
                               want, rtol=1e-5, atol=1e-6)


def test_serve_single_model_files_and_argument_errors(tmp_path, context_models):
    model = tmp_path / "m.rknn"
    model.write_bytes(context_models["add"])
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    d = _Daemon("--model", f"adder={model}", "--token-file", str(token_file))
    try:
        assert _http(d.url + "/v2/models/adder")[0] == 401
        status, _, body = _http(d.url + "/v2/models/adder", headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and json.loads(body)["name"] == "adder"
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(timeout=120) == 0
    finally:
        d.stop()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    listen = ["serve", "--model", f"adder={model}"]
    for args, fragment in ((["serve"], "--model-repository"), (["serve", "--model", "noequals"], "NAME=FILE"),
                           (["serve", "--model-repository", str(tmp_path / "none")], "not a folder"),
                           # the socket layer served --port 99999 on 34463 (modulo 65536)
                           (listen + ["--port", "99999"], "port (--port) must be an int in 0..65535"),
                           (listen + ["--max-body-bytes", "0"], "max_body_bytes (--max-body-bytes) must be"),
                           (listen + ["--drain-timeout", "-1"], "drain_timeout (--drain-timeout) must be a number")):
        r = subprocess.run([sys.executable, "-m", "rknnlite", *args], capture_output=True, text=True, env=env,
                           timeout=120)
        assert r.returncode == 1 and fragment in r.stderr


def test_tritonclient_example_runs():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, str(REPO / "examples" / "client_tritonclient.py"), "--local"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    classes = re.findall(r"class (\d+)", r.stdout)
    assert len(classes) == 3 and len(set(classes)) == 1  # binary, JSON and the local run agree


# -- packaging ---------------------------------------------------------------------------------


def test_systemd_unit_verifies(tmp_path):
    unit = REPO / "packaging" / "systemd" / "rknnlite.service"
    text = unit.read_text()
    for setting in ("DynamicUser=yes", "ProtectSystem=strict", "DevicePolicy=closed", "DeviceAllow=/dev/rknpu",
                    "DeviceAllow=char-drm", "Restart=on-failure", "Type=notify"):
        assert setting in text
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's program exists: point it at this environment's command
    local = tmp_path / "rknnlite.service"
    local.write_text(text.replace("/usr/bin/rknnlite", shutil.which("rknnlite") or sys.executable))
    r = subprocess.run([tool, "verify", "--man=no", str(local)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr

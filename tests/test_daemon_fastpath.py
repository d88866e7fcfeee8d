"""The daemon's per-request fast paths: the header memory of RequestParser, JSON through
orjson or the standard library, short runs on the event loop thread (QueueRunner), and the
event loop choice of `rknnlite serve --loop`."""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import threading

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from oip_requests import binary_body  # noqa: E402

from rknnlite import Context  # noqa: E402
from rknnlite.daemon import command, protocol  # noqa: E402
from rknnlite.daemon.protocol import (ProtocolError, RequestParser, encode_infer_response,  # noqa: E402
                                      parse_infer_request)
from rknnlite.daemon.runner import WINDOW, QueueRunner  # noqa: E402
from rknnlite.daemon.server import STATE_KEY, Server  # noqa: E402
from rknnlite.errors import InvalidParamError  # noqa: E402


def _same(a, b):
    assert (a.id, a.binary_output, a.parameters) == (b.id, b.binary_output, b.parameters)
    assert a.outputs == b.outputs
    assert [(t.name, t.datatype, t.shape) for t in a.inputs] == [(t.name, t.datatype, t.shape) for t in b.inputs]
    for x, y in zip(a.inputs, b.inputs):
        assert x.data.dtype == y.data.dtype
        np.testing.assert_array_equal(x.data, y.data)


# -- RequestParser ---------------------------------------------------------------------------


def test_remembered_header_decodes_each_body_like_parse_infer_request():
    parser = RequestParser()
    rng = np.random.default_rng(0)
    outputs = [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}]
    for _ in range(3):  # the same header each time, new tensor bytes
        x = rng.standard_normal((2, 3)).astype(np.float32)
        i = rng.integers(-9, 9, (4,)).astype(np.int64)
        body, n = binary_body([("x", x), ("i", i)], outputs, "r1", binary_data_output=True)
        got = parser.parse(body, n)
        _same(got, parse_infer_request(body, n))
        np.testing.assert_array_equal(got.inputs[0].data, x)
        assert not got.inputs[0].data.flags.writeable  # a view of the body, as without the memory
    assert len(parser._plans) == 1


def test_headers_with_json_data_or_bytes_are_decoded_every_time():
    parser = RequestParser()
    s = np.array([b"ab", b"c"], dtype=object)
    body, n = binary_body([("s", s)])
    for _ in range(2):
        assert parser.parse(body, n).inputs[0].data.tolist() == [b"ab", b"c"]
    doc = json.dumps({"inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}).encode()
    for _ in range(2):
        assert parser.parse(doc, str(len(doc))).inputs[0].data.tolist() == [1, 2]
        assert parser.parse(doc).inputs[0].data.tolist() == [1, 2]
    assert not parser._plans


def test_the_memory_never_skips_a_check():
    parser = RequestParser()
    x = np.zeros(4, np.float32)
    body, n = binary_body([("x", x)])
    parser.parse(body, n)
    for bad_body, bad_n, fragment in ((body[:-1], n, "runs past the end"), (body + b"\0", n, "no input claims"),
                                      (body, "abc", "must be an integer"), (body, str(len(body) + 1), "outside")):
        with pytest.raises(ProtocolError, match=fragment):
            parser.parse(bad_body, bad_n)
    header = json.dumps({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    for _ in range(2):  # a header that failed is not remembered
        with pytest.raises(ProtocolError, match="needs 12"):
            parser.parse(header + x.tobytes(), str(len(header)))
    np.testing.assert_array_equal(parser.parse(body, n).inputs[0].data, x)  # and the parser is still fine


def test_the_memory_is_bounded():
    parser = RequestParser(size=4)
    for k in range(10):
        body, n = binary_body([("x", np.full(2, k, np.float32))], request_id=f"id{k}")
        req = parser.parse(body, n)
        assert req.id == f"id{k}" and req.inputs[0].data.tolist() == [k, k]
        assert len(parser._plans) <= 4
    long_body, long_n = binary_body([("x" * 5000, np.zeros(1, np.float32))])
    assert parser.parse(long_body, long_n).inputs[0].name == "x" * 5000
    assert all(len(key[0]) <= parser.max_header_bytes for key in parser._plans)


# -- JSON with and without orjson ------------------------------------------------------------


@pytest.fixture(params=["orjson", "stdlib"])
def json_codec(request, monkeypatch):
    if request.param == "orjson":
        pytest.importorskip("orjson")
        assert protocol._orjson is not None
    else:
        monkeypatch.setattr(protocol, "_orjson", None)
    return request.param


def test_both_codecs_read_and_write_the_same_documents(json_codec):
    req = parse_infer_request(json.dumps({"id": "é", "inputs": [
        {"name": "a", "shape": [2, 2], "datatype": "FP32", "data": [[0.1, 2], [3, 4]]}]}).encode())
    assert req.id == "é" and req.inputs[0].data.dtype == np.float32
    y = np.array([[0.1, 1 / 3, -2.5e-8]], np.float32)
    outputs = [("y", y, False), ("h", y.astype(np.float16), False), ("i", np.arange(3, dtype=np.uint16), False),
               ("b", np.array([True, False]), False), ("s", np.array([b"x"], dtype=object), False),
               ("r", y[:, ::2], False), ("w", y.astype(">f4"), False)]
    body, n = encode_infer_response("m", "1", "é", outputs)
    doc = json.loads(body)
    assert n is None and doc["id"] == "é"
    got = {o["name"]: o["data"] for o in doc["outputs"]}
    np.testing.assert_array_equal(np.array(got["y"], np.float32), y.ravel())  # float32 values exactly
    np.testing.assert_array_equal(np.array(got["w"], np.float32), y.ravel())
    np.testing.assert_array_equal(np.array(got["r"], np.float32), y[:, ::2].ravel())
    np.testing.assert_array_equal(np.array(got["h"], np.float16), y.astype(np.float16).ravel())
    assert got["i"] == [0, 1, 2] and got["b"] == [True, False] and got["s"] == ["x"]
    assert json.loads(protocol.error_body("bad")) == {"error": "bad"}


def test_non_finite_outputs_are_written_as_the_standard_library_does(json_codec):
    y = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    body, _ = encode_infer_response("m", "1", None, [("y", y, False)])
    assert b"NaN" in body and b"Infinity" in body
    np.testing.assert_array_equal(np.array(json.loads(body)["outputs"][0]["data"], np.float32), y)


def test_malformed_json_is_a_protocol_error_with_both_codecs(json_codec):
    for body in (b"{nope", b"\xff\xfe{}", b"[1]"):
        with pytest.raises(ProtocolError) as info:
            parse_infer_request(body)
        assert info.value.status == 400


# -- QueueRunner: short runs on the event loop thread -----------------------------------------


@pytest.fixture
def add_runner(context_models):
    runners = []

    def make(**kwargs):
        runner = QueueRunner(Context(context_models["add"]), **kwargs)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def _run(coro):
    return asyncio.run(coro)


def test_short_runs_move_to_the_event_loop_thread(add_runner):
    runner = add_runner(instances=2, inline_max_us=5000)  # generous: the mechanism, not the threshold, is tested
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    threads = set()
    real_infer = runner._queue.infer

    def spy(inputs):
        threads.add(threading.get_ident())
        return real_infer(inputs)

    runner._queue.infer = spy

    async def go():
        assert not runner.inline  # runs are timed on the workers first
        for _ in range(WINDOW):
            np.testing.assert_array_equal((await runner.run([a, a]))[0], 2 * a)
        workers = set(threads)
        assert threading.get_ident() not in workers
        assert runner.inline  # a 1x4 Add takes microseconds
        threads.clear()
        outs = await asyncio.gather(*[runner.run([a, a + k]) for k in range(8)])
        for k, out in enumerate(outs):
            np.testing.assert_array_equal(out[0], 2 * a + k)
        assert threads == {threading.get_ident()}

    _run(go())


def test_inline_max_us_zero_keeps_every_run_on_the_workers(add_runner):
    runner = add_runner(inline_max_us=0)
    a = np.ones((1, 4), np.float32)

    async def go():
        for _ in range(2 * WINDOW):
            await runner.run([a, a])
        assert not runner.inline

    _run(go())


def test_slow_inline_runs_go_back_to_the_workers(add_runner):
    runner = add_runner()
    runner._timed_run(1e-6)
    for _ in range(WINDOW):
        runner._timed_run(1e-6)
    assert runner.inline
    runner._timed_run(1.0)  # once: maybe only the process losing its CPU
    assert runner.inline
    runner._timed_run(1e-6)
    runner._timed_run(1.0)
    runner._timed_run(1.0)  # twice in a row: a slow run
    assert not runner.inline
    for _ in range(WINDOW):  # a window of slow runs keeps it there
        runner._timed_run(0.5)
    assert not runner.inline


def test_inline_waits_for_a_context_when_every_one_is_busy(add_runner):
    runner = add_runner(instances=1)
    for _ in range(WINDOW):
        runner._timed_run(1e-6)
    assert runner.inline
    a = np.ones((1, 4), np.float32)
    used = []

    async def go():
        runner._busy = 1  # as while a run is on the worker
        real = runner._workers.submit

        def submit(fn, *args):
            used.append("worker")
            runner._busy -= 1  # this test's stand-in run holds no context
            return real(fn, *args)

        runner._workers.submit = submit
        out = await runner.run([a, a])
        np.testing.assert_array_equal(out[0], 2 * a)

    _run(go())
    assert used == ["worker"]


def test_runtime_errors_propagate_from_both_paths(add_runner):
    runner = add_runner()
    bad = [np.ones((1, 4), np.float32)]  # one input of two

    async def go():
        for inline in (False, True):
            runner.inline = inline
            with pytest.raises(Exception) as info:
                await runner.run(bad)
            assert "input" in str(info.value).lower()
            ok = await runner.run([np.ones((1, 4), np.float32)] * 2)  # still usable
            np.testing.assert_array_equal(ok[0], np.full((1, 4), 2, np.float32))

    _run(go())


# -- rknnlite serve --loop ---------------------------------------------------------------------


async def _which_loop():
    return command.loop_kind(asyncio.get_running_loop())


def test_loop_asyncio_runs_on_the_standard_library_loop():
    policy = asyncio.get_event_loop_policy()
    assert command._run_loop(_which_loop(), "asyncio") == "asyncio"
    assert asyncio.get_event_loop_policy() is policy


def test_loop_uvloop_and_auto_use_uvloop_only_for_the_server_loop():
    pytest.importorskip("uvloop")
    policy = asyncio.get_event_loop_policy()
    assert command._run_loop(_which_loop(), "uvloop") == "uvloop"
    assert command._run_loop(_which_loop(), "auto") == "uvloop"
    assert asyncio.get_event_loop_policy() is policy  # never installed as the process's policy
    assert command.loop_kind(asyncio.new_event_loop()) == "asyncio"


def test_loop_without_uvloop_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert command._run_loop(_which_loop(), "auto") == "asyncio"
    coro = _which_loop()
    with pytest.raises(InvalidParamError, match="uvloop is not installed"):
        command._run_loop(coro, "uvloop")
    coro.close()


def test_serve_loop_option_is_parsed_and_checked():
    import argparse

    p = argparse.ArgumentParser()
    command.add_arguments(p)
    assert p.parse_args([]).loop == "auto"
    assert p.parse_args(["--loop", "asyncio"]).loop == "asyncio"
    with pytest.raises(SystemExit):
        p.parse_args(["--loop", "tokio"])


def test_large_binary_outputs_are_written_into_one_body():
    rng = np.random.default_rng(5)
    big = rng.standard_normal((1, 32, 56, 56)).astype(np.float32)
    swapped = big[:, :4].astype(">f4")  # big-endian: sent little-endian
    strided = big[:, ::2]  # not contiguous
    s = np.array([b"ab", b""], dtype=object)
    outputs = [("big", big, True), ("j", big[0, 0, 0, :3], False), ("sw", swapped, True), ("s", s, True),
               ("st", strided, True)]
    body, n = encode_infer_response("m", "1", None, outputs)
    doc = json.loads(bytes(body[:n]))
    sizes = [o.get("parameters", {}).get("binary_data_size") for o in doc["outputs"]]
    assert sizes == [big.nbytes, None, swapped.nbytes, 4 + 2 + 4, strided.nbytes]
    tail = bytes(body[n:])
    assert len(tail) == sum(x for x in sizes if x)
    pos = 0
    for want, size in ((big, sizes[0]), (swapped, sizes[2]), (None, sizes[3]), (strided, sizes[4])):
        chunk = tail[pos:pos + size]
        if want is None:
            assert chunk == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)
        else:
            np.testing.assert_array_equal(np.frombuffer(chunk, "<f4").reshape(want.shape), want)
        pos += size
    small, m = encode_infer_response("m", "1", None, [("y", big[0, 0, 0, :4], True)])
    assert isinstance(small, bytes) and small[m:] == big[0, 0, 0, :4].tobytes()


# -- over HTTP -----------------------------------------------------------------------------------


def test_server_fast_paths_answer_like_context_run(tmp_path, context_models, conv_relu_model):
    import urllib.request

    conv = conv_relu_model(channels=16, size=32)  # output 1x32x32x32 float32: 128 KiB, written in one copy
    (tmp_path / "conv.rknn").write_bytes(conv)
    (tmp_path / "add.rknn").write_bytes(context_models["add"])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    with Context(conv) as ctx:
        want = ctx.run([x])[0]

    def post(server, name, arrays):
        body, n = binary_body(arrays, binary_data_output=True)
        req = urllib.request.Request(f"{server.url}/v2/models/{name}/infer", data=body, method="POST",
                                     headers={"Inference-Header-Content-Length": n})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            k = int(r.headers["Inference-Header-Content-Length"])
        return json.loads(raw[:k]), raw[k:]

    with Server(models={"conv": str(tmp_path / "conv.rknn"), "add": str(tmp_path / "add.rknn")}) as s:
        doc, tail = post(s, "conv", [("x", x)])
        assert doc["outputs"][0]["shape"] == list(want.shape)
        np.testing.assert_array_equal(np.frombuffer(tail, np.float32).reshape(want.shape), want)
        for k in range(WINDOW + 8):  # the same header each time (remembered); short runs go inline
            a = np.full((1, 4), k, np.float32)
            _, tail = post(s, "add", [("a", a), ("b", a)])
            np.testing.assert_array_equal(np.frombuffer(tail, np.float32), 2 * a.ravel())
        assert s.call(_runs_inline(s, "add"))
        assert s.app[STATE_KEY].parser._plans  # the header was remembered


async def _runs_inline(server, name):
    return server.manager.get(name)._runner.inline

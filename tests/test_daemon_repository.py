"""The daemon's model repository (config.json, confinement, load/unload/reload) and dynamic batcher."""

from __future__ import annotations

import asyncio
import json
import os

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from rknnlite.daemon.batching import BatcherClosedError, DynamicBatcher  # noqa: E402
from rknnlite.daemon.protocol import InferInput, ProtocolError  # noqa: E402
from rknnlite.daemon.repository import ConfigError, ModelManager, ModelRepository  # noqa: E402
from rknnlite.daemon.security import confine  # noqa: E402
from rknnlite.errors import InvalidParamError  # noqa: E402


def _folder(root, name, model_bytes=None, config=None, file="model.rknn"):
    folder = root / name
    folder.mkdir()
    if model_bytes is not None:
        (folder / file).write_bytes(model_bytes)
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return folder


def test_folder_without_config_serves_its_only_rknn(tmp_path, context_models):
    _folder(tmp_path, "add", context_models["add"])
    repo = ModelRepository(str(tmp_path))
    assert repo.names() == ["add"]
    config = repo.config("add")
    assert config.model_file == os.path.realpath(tmp_path / "add" / "model.rknn")
    assert (config.backend, config.instances, config.max_batch_size, config.version) == ("auto", 1, 0, "1")


def test_full_config_is_parsed(tmp_path, context_models):
    _folder(tmp_path, "m", context_models["conv_fp16"], {
        "model_file": "model.rknn", "backend": "software", "core_mask": "core_0_1", "instances": 2,
        "max_concurrency": 5, "dynamic_batching": {"max_batch_size": 4, "max_queue_delay_us": 200},
        "inputs": [{"name": "images", "tensor": "x", "format": "nhwc"}], "outputs": [{"name": "out", "tensor": "y"}],
        "version": "3"})
    c = ModelRepository(str(tmp_path)).config("m")
    assert (c.backend, c.core_mask, c.instances, c.max_concurrency) == ("software", 3, 2, 5)
    assert (c.max_batch_size, c.max_queue_delay_us, c.version) == (4, 200, "3")
    assert c.inputs == [{"name": "images", "tensor": "x", "format": "nhwc"}]


@pytest.mark.parametrize("config, key", [
    ({"instance": 2}, "'instance'"),
    ({"instances": 0}, "'instances'"),
    ({"backend": "gpu"}, "'backend'"),
    ({"core_mask": "CORE_9"}, "'core_mask'"),
    ({"dynamic_batching": {"max_batch_size": 0}}, "'max_batch_size'"),
    ({"dynamic_batching": {"size": 2}}, "'dynamic_batching'"),
    ({"inputs": [{"name": "a", "format": "nchw4"}]}, "inputs[0]'.format"),
    ({"inputs": {"name": "a"}}, "'inputs'"),
    ({"version": 2}, "'version'"),
    ({"model_file": "missing.rknn"}, "'model_file'"),
    ("{broken", "malformed JSON"),
    ([1], "JSON object"),
])
def test_config_errors_name_file_and_key(tmp_path, context_models, config, key):
    _folder(tmp_path, "m", context_models["add"], config)
    with pytest.raises(ConfigError) as info:
        ModelRepository(str(tmp_path)).config("m")
    assert str(tmp_path / "m" / "config.json") in info.value.message
    assert key in info.value.message


def test_two_rknn_files_need_model_file(tmp_path, context_models):
    folder = _folder(tmp_path, "m", context_models["add"])
    (folder / "other.rknn").write_bytes(context_models["add"])
    with pytest.raises(ConfigError, match="set 'model_file'"):
        ModelRepository(str(tmp_path)).config("m")


@pytest.mark.parametrize("model_file", ["../outside.rknn", "/etc/passwd", "sub/../../outside.rknn", "link.rknn"])
def test_model_files_are_confined_to_their_folder(tmp_path, context_models, model_file):
    (tmp_path / "outside.rknn").write_bytes(context_models["add"])
    root = tmp_path / "repo"
    root.mkdir()
    folder = _folder(root, "m", None, {"model_file": model_file})
    os.symlink(tmp_path / "outside.rknn", folder / "link.rknn")
    with pytest.raises(ConfigError) as info:
        ModelRepository(str(root)).config("m")
    assert "'model_file'" in info.value.message


def test_key_file_is_confined_too(tmp_path, context_models):
    _folder(tmp_path, "m", context_models["add"], {"key_file": "../k.key"})
    with pytest.raises(ConfigError, match="'key_file'"):
        ModelRepository(str(tmp_path)).config("m")


def test_symlinked_folder_outside_the_root_is_not_a_model(tmp_path, context_models):
    outside = _folder(tmp_path, "outside", context_models["add"])
    root = tmp_path / "repo"
    root.mkdir()
    os.symlink(outside, root / "escape")
    _folder(root, "inside", context_models["add"])
    repo = ModelRepository(str(root))
    assert repo.names() == ["inside"]
    with pytest.raises(ProtocolError) as info:
        repo.config("escape")
    assert info.value.status == 404


def test_confine_helper(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("x")
    assert confine(str(tmp_path / "a"), "f", "k") == os.path.realpath(tmp_path / "a" / "f")
    for bad in ("", "~/f", "..", "x/../../f", 3, "f\0"):  # "f\0": os's ValueError, found by a config fuzz
        with pytest.raises(InvalidParamError):
            confine(str(tmp_path / "a"), bad, "k")


def test_repository_argument_errors(tmp_path):
    with pytest.raises(InvalidParamError, match="not a folder"):
        ModelRepository(str(tmp_path / "missing"))
    with pytest.raises(InvalidParamError, match="model name"):
        ModelRepository(None, {"../x": "f.rknn"})


def test_manager_keeps_a_broken_model_unavailable_with_its_reason(tmp_path, context_models, caplog):
    _folder(tmp_path, "good", context_models["add"])
    _folder(tmp_path, "broken", b"this is not a model")
    _folder(tmp_path, "badconf", context_models["add"], {"instances": -1})
    manager = ModelManager(ModelRepository(str(tmp_path)))

    async def go():
        with caplog.at_level("ERROR", logger="rknnlite"):
            await manager.load_all()
        try:
            index = {e["name"]: e for e in manager.index()}
            assert index["good"]["state"] == "READY"
            assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]
            assert "'instances'" in index["badconf"]["reason"]
            meta = manager.get("broken").metadata()
            assert meta["state"] == "UNAVAILABLE" and meta["reason"] == index["broken"]["reason"]
            assert [e["name"] for e in manager.index(ready_only=True)] == ["good"]
        finally:
            await manager.close()

    asyncio.run(go())
    assert any("broken" in r.getMessage() and "unavailable" in r.getMessage() for r in caplog.records)


def test_manager_reload_load_and_unload(tmp_path, context_models):
    good = _folder(tmp_path, "good", context_models["add"])
    manager = ModelManager(ModelRepository(str(tmp_path)))

    async def go():
        await manager.load_all()
        first = manager.get("good")
        assert await manager.reload() == []  # nothing changed
        assert manager.get("good") is first
        # a new folder, a changed config, a removed folder
        _folder(tmp_path, "new", context_models["add"])
        (good / "config.json").write_text(json.dumps({"version": "2"}))
        changed = await manager.reload()
        assert sorted(changed) == ["good", "new"]
        assert manager.get("good").version == "2" and not first.ready  # the old one is closed
        os.rename(tmp_path / "new", tmp_path / ".gone")
        assert await manager.reload() == ["new"] and manager.get("new") is None
        # unloaded through the API: reloads leave it unloaded, load brings it back
        await manager.unload("good")
        assert manager.get("good") is None and await manager.reload() == []
        assert {e["name"]: e["state"] for e in manager.index()} == {"good": "UNAVAILABLE"}
        with pytest.raises(ProtocolError) as info:
            await manager.unload("good")
        assert info.value.status == 404
        assert (await manager.load("good")).ready
        with pytest.raises(ProtocolError) as info:
            await manager.load("nope")
        assert info.value.status == 404
        await manager.close()

    asyncio.run(go())


def test_encrypted_model_with_its_key_file(tmp_path, context_models, monkeypatch):
    from rknnlite.model import envelope

    monkeypatch.delenv("RKNNLITE_MODEL_KEY", raising=False)
    key = envelope.generate_key()
    sealed = envelope.encrypt(context_models["add"], key)
    folder = _folder(tmp_path, "sealed", sealed, {"key_file": "model.key"})
    envelope.write_key_file(str(folder / "model.key"), key)
    _folder(tmp_path, "nokey", sealed)
    manager = ModelManager(ModelRepository(str(tmp_path)))

    async def go():
        await manager.load_all()
        try:
            model = manager.get("sealed")
            assert model.ready
            a = np.ones((1, 4), np.float32)
            out = await model.infer(*model.check_inputs([InferInput("a", "FP32", (1, 4), a),
                                                         InferInput("b", "FP32", (1, 4), a)]))
            np.testing.assert_array_equal(out["y"], 2 * a)
            assert not manager.get("nokey").ready and "key" in manager.get("nokey").reason.lower()
        finally:
            await manager.close()

    asyncio.run(go())


def test_served_model_checks_inputs(tmp_path, context_models):
    _folder(tmp_path, "add", context_models["add"])
    manager = ModelManager(ModelRepository(str(tmp_path)))

    async def go():
        await manager.load_all()
        model = manager.get("add")
        a = np.ones((1, 4), np.float32)
        ok = [InferInput("a", "FP32", (1, 4), a), InferInput("b", "FP32", (1, 4), a)]
        arrays, rows = model.check_inputs(ok)
        assert rows == 1 and len(arrays) == 2
        out = await model.infer(arrays, rows)
        np.testing.assert_allclose(out["y"], 2 * a)
        for inputs, fragment in [
            (ok[:1], "missing input(s) 'b'"),
            (ok + [InferInput("c", "FP32", (1, 4), a)], "unknown input 'c'"),
            (ok + ok[:1], "given twice"),
            ([ok[0], InferInput("b", "INT64", (1, 4), a.astype(np.int64))], "takes FP32 or FP16 or UINT8"),
            ([ok[0], InferInput("b", "FP32", (4,), a.reshape(4))], "expects [1, 4]"),
        ]:
            with pytest.raises(ProtocolError) as info:
                model.check_inputs(inputs)
            assert fragment in info.value.message
        await manager.close()

    asyncio.run(go())


def test_nhwc_inputs_and_renamed_outputs(tmp_path, context_models):
    from rknnlite import Context

    _folder(tmp_path, "conv", context_models["conv_fp16"], {
        "inputs": [{"name": "image", "tensor": "x", "format": "nhwc"}],
        "outputs": [{"name": "features", "tensor": "y", "format": "nhwc"}]})
    manager = ModelManager(ModelRepository(str(tmp_path)))
    x = np.random.default_rng(0).uniform(0, 255, (1, 8, 8, 3)).astype(np.float32)

    async def go():
        await manager.load_all()
        model = manager.get("conv")
        meta = model.metadata()
        assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [1, 8, 8, 3]}]
        assert meta["outputs"] == [{"name": "features", "datatype": "FP32", "shape": [1, 8, 8, 4]}]
        arrays, rows = model.check_inputs([InferInput("image", "FP32", x.shape, x)])
        out = await model.infer(arrays, rows)
        await manager.close()
        return out["features"]

    got = asyncio.run(go())
    with Context(context_models["conv_fp16"]) as ctx:
        want = ctx.run([x], data_format="nhwc")[0].transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(got, want)


def test_inputs_default_to_the_attributes_layout_and_nchw_is_a_format(tmp_path, context_models):
    # the image input's attribute is NHWC (as librknnrt reports it): clients send NHWC unless
    # the config says "nchw"; outputs keep their NCHW unless it says "nhwc"
    from rknnlite import Context

    _folder(tmp_path, "own", context_models["conv_fp16"], {})
    _folder(tmp_path, "nchw", context_models["conv_fp16"], {"inputs": [{"name": "x", "format": "nchw"}]})
    manager = ModelManager(ModelRepository(str(tmp_path)))
    x = np.random.default_rng(1).uniform(0, 255, (1, 3, 8, 8)).astype(np.float32)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    async def go():
        await manager.load_all()
        got = {}
        for name, data in (("own", nhwc), ("nchw", x)):
            model = manager.get(name)
            meta = model.metadata()
            assert meta["inputs"][0]["shape"] == list(data.shape) and meta["outputs"][0]["shape"] == [1, 4, 8, 8]
            arrays, rows = model.check_inputs([InferInput("x", "FP32", data.shape, data)])
            got[name] = (await model.infer(arrays, rows))["y"]
        await manager.close()
        return got

    got = asyncio.run(go())
    with Context(context_models["conv_fp16"]) as ctx:
        want = ctx.run([nhwc])[0]
    np.testing.assert_array_equal(got["own"], want)
    np.testing.assert_array_equal(got["nchw"], want)


# -- dynamic batching ---------------------------------------------------------------------------


class _RecordingRunner:
    """run() doubles its inputs and records the batches it saw."""

    def __init__(self, fail=False):
        self.batches = []
        self.fail = fail

    async def run(self, arrays):
        self.batches.append([a.copy() for a in arrays])
        await asyncio.sleep(0)
        if self.fail:
            raise ValueError("runtime refused")
        return [a * 2 for a in arrays]


def test_batcher_gathers_pads_and_splits():
    runner = _RecordingRunner()
    sizes = []
    batcher = DynamicBatcher(runner.run, capacity=4, max_batch_size=3, max_queue_delay_us=10_000_000,
                             on_batch=sizes.append)

    async def go():
        reqs = [np.full((1, 2), k, np.float32) for k in range(3)] + [np.full((2, 2), 9, np.float32)]
        results = await asyncio.gather(*[batcher.submit([r], r.shape[0]) for r in reqs])
        await batcher.close()
        return reqs, results

    reqs, results = asyncio.run(go())
    # max_batch_size 3 reached by the first three requests (no waiting for the delay)
    assert sizes == [3, 2]
    first = runner.batches[0][0]
    assert first.shape == (4, 2)  # padded to the model's batch
    np.testing.assert_array_equal(first[:3, 0], [0, 1, 2])
    np.testing.assert_array_equal(first[3], [0, 0])
    for r, out in zip(reqs, results):
        np.testing.assert_array_equal(out[0], r * 2)


def test_batcher_runs_a_lone_request_after_the_delay_and_propagates_errors():
    runner = _RecordingRunner(fail=True)
    batcher = DynamicBatcher(runner.run, capacity=2, max_batch_size=2, max_queue_delay_us=1000)

    async def go():
        with pytest.raises(ValueError, match="runtime refused"):
            await batcher.submit([np.zeros((1, 3), np.float32)], 1)
        await batcher.close()
        with pytest.raises(BatcherClosedError, match="unloaded"):
            await batcher.submit([np.zeros((1, 3), np.float32)], 1)

    asyncio.run(go())
    assert len(runner.batches) == 1 and runner.batches[0][0].shape == (2, 3)


async def _waiting_request(batcher: DynamicBatcher) -> asyncio.Future:
    """A one-row request of ones, once it waits in ``batcher`` for more rows."""
    waiting = asyncio.ensure_future(batcher.submit([np.ones((1, 2), np.float32)], 1))
    while batcher.depth == 0:
        await asyncio.sleep(0)
    return waiting


def test_batcher_close_runs_waiting_requests_then_refuses_new_ones():
    runner = _RecordingRunner()
    batcher = DynamicBatcher(runner.run, capacity=4, max_batch_size=4, max_queue_delay_us=60_000_000)

    async def go():
        waiting = await _waiting_request(batcher)
        await batcher.close()  # does not wait the 60 s for more rows
        assert waiting.done()
        return waiting.result()

    out = asyncio.run(go())
    np.testing.assert_array_equal(out[0], [[2, 2]])
    assert len(runner.batches) == 1


def test_batcher_flush_runs_waiting_requests_at_once_and_keeps_taking_new_ones():
    # a draining server flushes: a lone request must not wait out an hour's queue delay, and a
    # request arriving after the flush (its body was still being read) is run too, not refused
    runner = _RecordingRunner()
    batcher = DynamicBatcher(runner.run, capacity=4, max_batch_size=4, max_queue_delay_us=3_600_000_000)

    async def go():
        waiting = await _waiting_request(batcher)
        batcher.flush()
        first = await asyncio.wait_for(waiting, 60)
        later = await asyncio.wait_for(batcher.submit([np.full((1, 2), 3, np.float32)], 1), 60)
        await batcher.close()
        return first, later

    first, later = asyncio.run(go())
    np.testing.assert_array_equal(first[0], [[2, 2]])
    np.testing.assert_array_equal(later[0], [[6, 6]])
    assert len(runner.batches) == 2


def test_batcher_argument_check():
    with pytest.raises(ValueError, match="max_batch_size"):
        DynamicBatcher(_RecordingRunner().run, capacity=2, max_batch_size=3, max_queue_delay_us=0)

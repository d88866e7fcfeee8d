"""Multi-batch models (built with rknn_batch_size=N) and set_batch_core_num on the software backend."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rknnlite
from rknnlite import InitFlag, InputInvalidError, InvalidParamError, ModelInvalidError
from rknnlite.model.graph import Graph, Node
from rknnlite.model.metadata import build_metadata
from rknnlite.model.portable import write_portable
from rknnlite.model.spec import TensorSpec


def batch_input(n, channels=8, size=16, seed=3):
    return np.random.default_rng(seed).standard_normal((n, channels, size, size)).astype(np.float32)


def one_by_one(conv_relu_model, x, **kw):
    """Each sample run alone on the batch-1 model, concatenated."""
    with rknnlite.Context(conv_relu_model(batch=1, **kw)) as single:
        return np.concatenate([single.run([x[k:k + 1]])[0] for k in range(x.shape[0])], axis=0)


@pytest.mark.parametrize("batch", [1, 2, 3, 4])
@pytest.mark.parametrize("core_num", [1, 2, 3])
def test_results_equal_each_sample_alone(conv_relu_model, batch, core_num):
    x = batch_input(batch)
    expected = one_by_one(conv_relu_model, x)
    with rknnlite.Context(conv_relu_model(batch=batch)) as ctx:
        assert ctx.inputs[0].dims == (batch, 8, 16, 16) and ctx.outputs[0].dims == (batch, 16, 16, 16)
        ctx.set_batch_core_num(core_num)
        for _ in range(2):  # the second run goes through the planned buffers
            (y,) = ctx.run([x])
            assert y.shape == (batch, 16, 16, 16) and y.dtype == np.float32
            np.testing.assert_array_equal(y, expected)


def test_float16_batch_equals_each_sample_alone(conv_relu_model):
    x = batch_input(3)
    expected = one_by_one(conv_relu_model, x, float_dtype="float16")
    with rknnlite.Context(conv_relu_model(batch=3, float_dtype="float16")) as ctx:
        ctx.set_batch_core_num(3)
        np.testing.assert_array_equal(ctx.run([x])[0], expected)


def test_samples_are_independent(conv_relu_model):
    x = batch_input(3)
    with rknnlite.Context(conv_relu_model(batch=3)) as ctx:
        ctx.set_batch_core_num(3)
        base = ctx.run([x])[0]
        changed = x.copy()
        changed[1] += 1.0
        y = ctx.run([changed])[0]
        np.testing.assert_array_equal(y[[0, 2]], base[[0, 2]])
        assert not np.array_equal(y[1], base[1])


def test_core_num_creates_one_state_per_core(conv_relu_model):
    with rknnlite.Context(conv_relu_model(batch=3)) as ctx:
        backend = ctx._backend
        ctx.set_batch_core_num(3)
        assert backend.batch_core_num == 3 and len(backend._batch_states) == 3
        assert all(s.pool.threads == 1 for s in backend._batch_states)
        ctx.run([batch_input(3)])
        assert ctx.mem_size().total_internal_size == sum(
            s.planned_bytes for s in [backend._state] + backend._batch_states)
        ctx.set_batch_core_num(1)
        assert backend.batch_core_num == 1 and backend._batch_states == []


class ThreadTag:
    """Custom op passing its input through and noting which thread ran it."""

    op_type = "cstThreadTag"

    def __init__(self):
        self.threads = set()
        self.lock = threading.Lock()

    def compute(self, node, inputs):
        with self.lock:
            self.threads.add(threading.get_ident())
        return [np.array(inputs[0])]


def tagged_model(batch):
    graph = Graph([Node("Relu", "relu", ["x"], ["r"]), Node("cstThreadTag", "tag", ["r"], ["y"])], ["x"], ["y"])
    meta = build_metadata([TensorSpec("x", (batch, 4), "float32")], [TensorSpec("y", (batch, 4), "float32")],
                          batch_size=batch, float_dtype="float32")
    return write_portable(meta, graph)


def test_samples_run_on_parallel_worker_threads():
    tag = ThreadTag()
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    with rknnlite.Context(tagged_model(3), custom_ops=[tag]) as ctx:
        np.testing.assert_array_equal(ctx.run([x])[0], np.maximum(x, 0))
        assert tag.threads == {threading.get_ident()}
        ctx.set_batch_core_num(3)
        tag.threads.clear()
        np.testing.assert_array_equal(ctx.run([x])[0], np.maximum(x, 0))
        assert len(tag.threads) == 3 and threading.get_ident() in tag.threads


def test_profile_sums_the_samples_and_shows_the_cores(conv_relu_model):
    with rknnlite.Context(conv_relu_model(batch=2), flags=InitFlag.COLLECT_PERF_MASK) as ctx:
        ctx.run([batch_input(2)])
        relu = [r for r in ctx.perf_detail(as_text=False).records if r.op_type == "Relu"][0]
        assert relu.workload == (1.0, 0.0, 0.0)  # one core, samples one after the other
        assert relu.rw_bytes == 2 * (2 * 16 * 16 * 16 * 4)  # two samples, read + write each
        assert relu.input_shapes == ((1, 16, 16, 16),)  # one sample's shapes
        ctx.set_batch_core_num(2)
        ctx.run([batch_input(2)])
        relu = [r for r in ctx.perf_detail(as_text=False).records if r.op_type == "Relu"][0]
        assert relu.workload == (0.5, 0.5, 0.0)


@pytest.mark.parametrize("platform, n", [("rk3588", 0), ("rk3588", 4), ("rk3576", 3), ("rk3588", -1),
                                         ("rk3588", 2.0), ("rk3588", "2"), ("rk3588", True)])
def test_bad_core_numbers(conv_relu_model, platform, n):
    with rknnlite.Context(conv_relu_model(platform, batch=2)) as ctx:
        with pytest.raises(InvalidParamError, match="batch core number") as err:
            ctx.set_batch_core_num(n)
        assert err.value.code == -5 and err.value.op == "rknn_set_batch_core_num"
        np.testing.assert_array_equal(ctx.run([batch_input(2)])[0], one_by_one(conv_relu_model, batch_input(2)))


@pytest.mark.parametrize("platform", ["rk3566", "rk3562", "rv1126b"])
def test_single_core_platforms_refuse(conv_relu_model, platform):
    with rknnlite.Context(conv_relu_model(platform, batch=2)) as ctx:
        with pytest.raises(InvalidParamError, match="only supported on RK3576 and RK3588"):
            ctx.set_batch_core_num(1)


def test_rk3576_takes_two_cores(conv_relu_model):
    with rknnlite.Context(conv_relu_model("rk3576", batch=2)) as ctx:
        ctx.set_batch_core_num(2)
        np.testing.assert_array_equal(ctx.run([batch_input(2)])[0], one_by_one(conv_relu_model, batch_input(2)))


def test_batch_one_model_ignores_the_core_num(conv_relu_model):
    with rknnlite.Context(conv_relu_model()) as ctx:
        ctx.set_batch_core_num(3)
        assert ctx._backend._batch_states == []
        assert ctx.run([batch_input(1)])[0].shape == (1, 16, 16, 16)


def test_wrong_batch_in_the_input(conv_relu_model):
    with rknnlite.Context(conv_relu_model(batch=3)) as ctx:
        with pytest.raises(InputInvalidError, match=r"\[3, 8, 16, 16\]"):
            ctx.run([batch_input(2)])
        assert ctx.run([batch_input(3)])[0].shape == (3, 16, 16, 16)


def test_io_not_divisible_by_the_batch_is_an_invalid_model():
    graph = Graph([Node("Relu", "relu", ["x"], ["y"])], ["x"], ["y"])
    meta = build_metadata([TensorSpec("x", (3, 4), "float32")], [TensorSpec("y", (3, 4), "float32")], batch_size=2)
    with pytest.raises(ModelInvalidError, match="multiple of 2"):
        rknnlite.Context(write_portable(meta, graph))


def test_dup_runs_batches_too(conv_relu_model):
    x = batch_input(2)
    with rknnlite.Context(conv_relu_model(batch=2)) as ctx:
        ctx.set_batch_core_num(2)
        twin = ctx.dup()
        assert twin._backend.batch_core_num == 1
        np.testing.assert_array_equal(twin.run([x])[0], ctx.run([x])[0])
        twin.close()

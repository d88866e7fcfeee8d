"""``Context(flags=...)`` on both backends: each flag implemented or refused at construction
(runtime.flags), ASYNC_MASK's previous frame, MEM_ALLOC_OUTSIDE / INTERNAL_ALLOC_OUTSIDE with
set_weight_mem / set_internal_mem, and what the npu backend asks librknnrt (custom string,
SDK version, memory sizes)."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.api import RKNNLite
from rknnlite.constants import InitFlag
from rknnlite.errors import InvalidParamError
from rknnlite.runtime.flags import REFUSED

from fake_model import FakeTensor, add_mul_model, fake_model_bytes, fake_node


def _scale_model(weight=3.0, custom_string=""):
    x, y = FakeTensor("x", (1, 3, 4, 4)), FakeTensor("y", (1, 3, 4, 4))
    return fake_model_bytes([x], [y], [fake_node("mul", ["x"], "y", const=weight, name="scale")],
                            custom_string=custom_string)


# -- refusals ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", list(REFUSED))
def test_unsupported_flags_are_refused_on_both_backends(flag, context_models, fake_npu):
    for model, backend in ((context_models["add"], "software"), (add_mul_model(), "npu")):
        with pytest.raises(InvalidParamError, match=f"InitFlag.{flag.name} .*is not supported"):
            rknnlite.Context(model, backend=backend, flags=flag)
    assert not fake_npu.calls("rknn_init")  # refused before librknnrt sees it


def test_bad_flag_values(context_models):
    for flags, match in ((0x80000, "no InitFlag bits"), (-1, "InitFlag bits"), ("8", "an int"),
                         (InitFlag.PRIOR_MEDIUM | InitFlag.PRIOR_LOW, "choose one priority")):
        with pytest.raises(InvalidParamError, match=match):
            rknnlite.Context(context_models["add"], flags=flags)


def test_accepted_flags_reach_rknn_init(fake_npu):
    flags = InitFlag.PRIOR_LOW | InitFlag.DISABLE_PROC_HIGH_PRIORITY
    with rknnlite.Context(add_mul_model(), backend="npu", flags=flags):
        assert f"flag=0x{int(flags):x}" in fake_npu.calls("rknn_init")[-1]


# -- ASYNC_MASK ----------------------------------------------------------------------------------

def _frames(ctx, make):
    return [float(ctx.run(make(k))[0].reshape(-1)[0]) for k in range(3)]


def test_async_mask_returns_the_previous_frame_on_both_backends(fake_npu, context_models):
    a = lambda k: [np.full((1, 4, 4, 3), k + 1, np.float32)]  # noqa: E731
    with rknnlite.Context(_scale_model(1.0), backend="npu", flags=InitFlag.ASYNC_MASK) as ctx:
        assert _frames(ctx, a) == [1.0, 1.0, 2.0]  # librknnrt's answer (the fake)
    model = context_models["add"]
    with rknnlite.Context(model) as plain:
        shapes = [tuple(i.dims) for i in plain.inputs]
    feed = lambda k: [np.full(s, k + 1, np.float32) for s in shapes]  # noqa: E731
    with rknnlite.Context(model) as sync, rknnlite.Context(model, flags=InitFlag.ASYNC_MASK) as asy:
        want = _frames(sync, feed)
        assert _frames(asy, feed) == [want[0], want[0], want[1]]


def test_async_mode_follows_async_mask(fake_npu, tmp_path):
    path = tmp_path / "scale.rknn"
    path.write_bytes(_scale_model(1.0))
    lite = RKNNLite()
    assert lite.load_rknn(str(path)) == 0
    assert lite.init_runtime(async_mode=True) == 0
    assert "flag=0x4" in fake_npu.calls("rknn_init")[-1]
    outs = [lite.inference([np.full((1, 4, 4, 3), k + 1, np.float32)])[0].reshape(-1)[0] for k in range(3)]
    assert outs == [1.0, 1.0, 2.0]
    lite.release()


def test_async_mask_is_refused_for_dynamic_models(fake_npu):
    x, y = FakeTensor("x", (1, 3, 8, 8)), FakeTensor("y", (1, 3, 8, 8))
    dyn = fake_model_bytes([x], [y], [fake_node("relu", ["x"], "y")],
                           dynamic_shapes=[[[1, 3, 8, 8]], [[1, 3, 4, 4]]])
    with pytest.raises(InvalidParamError, match="ASYNC_MASK is refused for a dynamic-shape model"):
        rknnlite.Context(dyn, backend="npu", flags=InitFlag.ASYNC_MASK)
    assert fake_npu.live("contexts") == 0


# -- memory the caller provides ------------------------------------------------------------------

def test_npu_mem_alloc_outside(fake_npu):
    with rknnlite.Context(_scale_model(3.0), backend="npu", flags=InitFlag.MEM_ALLOC_OUTSIDE) as ctx:
        x = [np.full((1, 4, 4, 3), 2.0, np.float32)]
        with pytest.raises(InvalidParamError, match=r"set_weight_mem\(\) and set_internal_mem\(\)"):
            ctx.run(x)
        size = ctx.mem_size()
        assert size.total_weight_size == 4  # the fake's one float32 constant
        with pytest.raises(InvalidParamError, match="has 2 bytes after its offset; the model needs 4"):
            ctx.set_weight_mem(ctx.create_mem(2))
        weights = ctx.create_mem(size.total_weight_size)
        ctx.set_weight_mem(weights)
        assert weights.array(np.float32)[0] == 3.0  # librknnrt wrote the weights there
        with pytest.raises(InvalidParamError, match=r"call set_internal_mem\(\)"):
            ctx.run(x)
        ctx.set_internal_mem(ctx.create_mem(max(size.total_internal_size, 1)))
        np.testing.assert_allclose(ctx.run(x)[0], 6.0)
        assert fake_npu.calls("rknn_set_weight_mem") and fake_npu.calls("rknn_set_internal_mem")


def test_set_mem_needs_the_flag_and_own_memory(fake_npu, context_models):
    with rknnlite.Context(_scale_model(), backend="npu") as ctx:
        with pytest.raises(InvalidParamError, match="needs a context created with InitFlag.MEM_ALLOC_OUTSIDE"):
            ctx.set_weight_mem(ctx.create_mem(64))
    with rknnlite.Context(context_models["add"], flags=InitFlag.INTERNAL_ALLOC_OUTSIDE) as a, \
            rknnlite.Context(context_models["add"], flags=InitFlag.INTERNAL_ALLOC_OUTSIDE) as b:
        with pytest.raises(InvalidParamError, match="set_weight_mem needs a context created with "
                                                    "InitFlag.MEM_ALLOC_OUTSIDE"):
            a.set_weight_mem(a.create_mem(64))
        with pytest.raises(InvalidParamError, match="memory made by this context"):
            a.set_internal_mem(b.create_mem(1 << 16))


def test_software_mem_alloc_outside_runs_in_the_given_memory(conv_relu_model):
    model = conv_relu_model()
    with rknnlite.Context(model) as plain:
        x = np.random.default_rng(0).standard_normal(tuple(plain.inputs[0].dims)).astype(np.float32)
        want = plain.run([x])[0]
    with rknnlite.Context(model, flags=InitFlag.MEM_ALLOC_OUTSIDE) as ctx:
        with pytest.raises(InvalidParamError, match="before running"):
            ctx.run([x])
        size = ctx.mem_size()  # plans the activations (one run on zeros)
        assert size.total_weight_size > 0 and size.total_internal_size > 0
        weights = ctx.create_mem(size.total_weight_size)
        internal = ctx.create_mem(size.total_internal_size)
        ctx.set_weight_mem(weights)
        ctx.set_internal_mem(internal)
        np.testing.assert_array_equal(ctx.run([x])[0], want)
        # the weights were copied into the caller's memory and the executor was built on them
        w = weights.array(np.uint8)
        constants = ctx._backend.model.graph.constants
        assert constants and all(np.shares_memory(c, w) for c in constants.values())
        original = rknnlite.Context(model)._backend.model.graph.constants
        for name, c in constants.items():
            np.testing.assert_array_equal(c, original[name])
        # the planned activations live in the internal memory
        before = internal.array(np.uint8).copy()
        ctx.run([x * 2])
        assert not np.array_equal(before, internal.array(np.uint8))


def test_software_internal_memory_too_small(conv_relu_model):
    with rknnlite.Context(conv_relu_model(), flags=InitFlag.INTERNAL_ALLOC_OUTSIDE) as ctx:
        need = ctx.mem_size().total_internal_size
        with pytest.raises(InvalidParamError, match=f"the model needs {need}"):
            ctx.set_internal_mem(ctx.create_mem(need - 1))


# -- what the npu backend asks librknnrt ----------------------------------------------------------------

def test_npu_custom_string_sdk_version_and_mem_size_come_from_librknnrt(fake_npu, monkeypatch):
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.3.7")
    blob = _scale_model(custom_string="file-metadata")
    # the runtime's answer (the fake reads its JSON trailer) differs from the file's FlatBuffer
    # metadata: the context must ask the runtime (same length: the file stays well-formed)
    blob = blob.replace(b'"custom_string": "file-metadata"', b'"custom_string": "librknnrt-ans"')
    with rknnlite.Context(blob, backend="npu") as ctx:
        fake_npu.clear()
        assert ctx.custom_string == "librknnrt-ans"
        assert "cmd=7" in fake_npu.calls("rknn_query")[-1]  # RKNN_QUERY_CUSTOM_STRING
        assert ctx.sdk_version()["api"].startswith("2.3.7")
        assert ctx.mem_size().total_weight_size == 4
        assert ctx.query(rknnlite.QueryCmd.CUSTOM_STRING) == "librknnrt-ans"
        assert ctx._loaded.model.custom_string == "file-metadata"  # what the file's reader says


def test_npu_internal_alloc_outside_needs_only_internal_memory(fake_npu):
    with rknnlite.Context(_scale_model(2.0), backend="npu", flags=InitFlag.INTERNAL_ALLOC_OUTSIDE) as ctx:
        x = [np.ones((1, 4, 4, 3), np.float32)]
        with pytest.raises(InvalidParamError, match=r"INTERNAL_ALLOC_OUTSIDE: call set_internal_mem\(\)"):
            ctx.run(x)
        with pytest.raises(InvalidParamError, match="set_weight_mem needs a context created with "
                                                    "InitFlag.MEM_ALLOC_OUTSIDE"):
            ctx.set_weight_mem(ctx.create_mem(4))
        internal = ctx.create_mem(max(ctx.mem_size().total_internal_size, 1))
        ctx.set_internal_mem(internal)
        np.testing.assert_allclose(ctx.run(x)[0], 2.0)
        internal.destroy()  # a destroyed memory is no memory: refused before librknnrt runs
        with pytest.raises(InvalidParamError, match=r"call set_internal_mem\(\)"):
            ctx.run(x)


@pytest.mark.parametrize("name", ["convnet_fp16", "convnet_i8"])
def test_software_mem_alloc_outside_on_a_vendor_file(vendor_fixtures, name):
    path = str(vendor_fixtures / "rknn" / f"{name}.rknn")
    with rknnlite.Context(path, backend="software") as plain:
        x = (np.random.default_rng(1).random(tuple(plain.inputs[0].dims)) * 255).astype(np.float32)
        want = plain.run([x])[0]
    with rknnlite.Context(path, backend="software", flags=InitFlag.MEM_ALLOC_OUTSIDE) as ctx:
        size = ctx.mem_size()
        ctx.set_weight_mem(ctx.create_mem(size.total_weight_size))
        ctx.set_internal_mem(ctx.create_mem(size.total_internal_size))
        np.testing.assert_array_equal(ctx.run([x])[0], want)  # the same graph, bit for bit

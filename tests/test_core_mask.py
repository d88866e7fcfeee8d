"""Core masks: cores per platform, accepted and rejected masks, worker threads of the software NPU."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import rknnlite
from rknnlite import CoreMask, InvalidParamError
from rknnlite.api import RKNNLite
from rknnlite.backends.software import parallel
from rknnlite.runtime import cores

ALL_MASKS = [CoreMask.AUTO, CoreMask.CORE_0, CoreMask.CORE_1, CoreMask.CORE_2, CoreMask.CORE_0_1,
             CoreMask.CORE_0_1_2, CoreMask.ALL]
ACCEPTED = {
    "rk3588": set(ALL_MASKS),
    "rk3576": {CoreMask.AUTO, CoreMask.CORE_0, CoreMask.CORE_1, CoreMask.CORE_0_1, CoreMask.ALL},
}


@pytest.fixture()
def many_cpus(monkeypatch):
    """Pretend 8 usable CPUs so the thread count follows the mask alone."""
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 8)
    monkeypatch.delenv("RKNNLITE_NUM_THREADS", raising=False)


def x_input(channels=8, size=16, seed=1):
    return np.random.default_rng(seed).standard_normal((1, channels, size, size)).astype(np.float32)


@pytest.mark.parametrize("platform, count", [("rk3588", 3), ("RK3576", 2), ("rk3566", 1), ("rk3568", 1),
                                             ("rk3562", 1), ("rv1126b", 1), ("", 1)])
def test_core_count(platform, count):
    assert cores.core_count(platform) == count
    assert cores.supports_core_mask(platform) == (count > 1)


@pytest.mark.parametrize("platform", ["rk3588", "rk3576"])
@pytest.mark.parametrize("mask", ALL_MASKS)
def test_valid_masks_accepted_others_rejected(conv_relu_model, platform, mask):
    with rknnlite.Context(conv_relu_model(platform)) as ctx:
        if mask in ACCEPTED[platform]:
            ctx.set_core_mask(mask)
            ctx.set_core_mask(int(mask))  # plain ints as the C API takes them
        else:
            with pytest.raises(InvalidParamError, match="core 2.*2 NPU cores") as err:
                ctx.set_core_mask(mask)
            assert err.value.code == -5 and err.value.op == "rknn_set_core_mask"
        assert ctx.run([x_input()])[0].shape == (1, 16, 16, 16)


@pytest.mark.parametrize("bad", [5, 6, 8, 0x10000, CoreMask.UNDEFINED, -1, 3.0, "CORE_0", True, None])
def test_values_that_are_no_mask_are_rejected(conv_relu_model, bad):
    with rknnlite.Context(conv_relu_model("rk3588")) as ctx:
        with pytest.raises(InvalidParamError, match="invalid core mask.*AUTO=0x0"):
            ctx.set_core_mask(bad)


@pytest.mark.parametrize("platform", ["rk3566", "rk3568", "rk3562", "rv1126b"])
@pytest.mark.parametrize("mask", [CoreMask.AUTO, CoreMask.CORE_0, CoreMask.ALL])
def test_single_core_platforms_refuse_every_mask(conv_relu_model, platform, mask):
    with rknnlite.Context(conv_relu_model(platform)) as ctx:
        with pytest.raises(InvalidParamError, match="only supported on RK3576 and RK3588.*" + platform.upper()):
            ctx.set_core_mask(mask)
        assert ctx.run([x_input()])[0].shape == (1, 16, 16, 16)


def test_target_platform_argument_decides_the_cores(conv_relu_model):
    with rknnlite.Context(conv_relu_model("rk3588"), target_platform="rk3566") as ctx:
        with pytest.raises(InvalidParamError, match="RK3566"):
            ctx.set_core_mask(CoreMask.CORE_0)
    with rknnlite.Context(conv_relu_model("rk3566"), target_platform="rk3576") as ctx:
        ctx.set_core_mask(CoreMask.CORE_1)
        with pytest.raises(InvalidParamError, match="core 2"):
            ctx.set_core_mask(CoreMask.CORE_2)


@pytest.mark.parametrize("platform, mask, threads", [
    ("rk3588", CoreMask.CORE_0, 1), ("rk3588", CoreMask.CORE_2, 1), ("rk3588", CoreMask.CORE_0_1, 2),
    ("rk3588", CoreMask.CORE_0_1_2, 3), ("rk3588", CoreMask.ALL, 3), ("rk3576", CoreMask.ALL, 2),
    ("rk3576", CoreMask.CORE_0_1, 2), ("rk3588", CoreMask.AUTO, 1),
])
def test_mask_sets_the_worker_threads(conv_relu_model, many_cpus, platform, mask, threads):
    with rknnlite.Context(conv_relu_model(platform)) as ctx:
        ctx.set_core_mask(CoreMask.CORE_0_1)
        ctx.set_core_mask(mask)
        assert ctx._backend.threads == threads
        assert ctx._backend._state.pool.threads == threads


def test_auto_keeps_the_environment_thread_count(conv_relu_model, monkeypatch, many_cpus):
    monkeypatch.setenv("RKNNLITE_NUM_THREADS", "2")
    with rknnlite.Context(conv_relu_model("rk3588")) as ctx:
        assert ctx._backend.threads == 2
        ctx.set_core_mask(CoreMask.CORE_0)
        assert ctx._backend.threads == 1
        ctx.set_core_mask(CoreMask.AUTO)
        assert ctx._backend.threads == 2


def test_threads_are_capped_by_usable_cpus(conv_relu_model, monkeypatch):
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 2)
    with rknnlite.Context(conv_relu_model("rk3588")) as ctx:
        ctx.set_core_mask(CoreMask.CORE_0_1_2)
        assert ctx._backend.threads == 2


def test_rejected_mask_keeps_the_previous_one(conv_relu_model, many_cpus):
    with rknnlite.Context(conv_relu_model("rk3576")) as ctx:
        ctx.set_core_mask(CoreMask.CORE_0_1)
        with pytest.raises(InvalidParamError):
            ctx.set_core_mask(CoreMask.CORE_0_1_2)
        assert ctx._backend.threads == 2


def test_results_do_not_depend_on_the_mask(conv_relu_model, many_cpus):
    model = conv_relu_model("rk3588", channels=32, size=40)
    x = x_input(32, 40)
    with rknnlite.Context(model) as ctx:
        expected = ctx.run([x])[0]
        for mask in (CoreMask.CORE_1, CoreMask.CORE_0_1, CoreMask.CORE_0_1_2):
            ctx.set_core_mask(mask)
            np.testing.assert_array_equal(ctx.run([x])[0], expected)


def conv_workload(ctx, x):
    ctx.run([x])
    detail = ctx.perf_detail(as_text=False)
    (conv,) = [r for r in detail.records if r.op_type == "Conv"]
    return conv.workload


def test_perf_detail_shows_the_emulated_core_of_each_op(conv_relu_model, many_cpus):
    x = x_input(32, 56)
    flags = rknnlite.InitFlag.COLLECT_PERF_MASK
    with rknnlite.Context(conv_relu_model("rk3588", channels=32, size=56), flags=flags) as ctx:
        assert conv_workload(ctx, x) == (1.0, 0.0, 0.0)  # AUTO: one core
        ctx.set_core_mask(CoreMask.CORE_2)
        assert conv_workload(ctx, x) == (0.0, 0.0, 1.0)
        ctx.set_core_mask(CoreMask.CORE_1)
        assert conv_workload(ctx, x) == (0.0, 1.0, 0.0)
        ctx.set_core_mask(CoreMask.CORE_0_1)
        # Ranges are handed out dynamically, so on a loaded machine the caller may run them all
        # before the second worker wakes up: every run stays on cores 0 and 1, and some run uses both.
        splits = []
        for _ in range(50):
            split = conv_workload(ctx, x)
            assert split[2] == 0 and sum(split) == pytest.approx(1.0)
            splits.append(split)
            if split[0] > 0 and split[1] > 0:
                break
        assert splits[-1][0] > 0 and splits[-1][1] > 0, splits
        relu = [r for r in ctx.perf_detail(as_text=False).records if r.op_type == "Relu"][0]
        assert relu.workload[2] == 0.0


def test_dup_keeps_the_platform(conv_relu_model):
    with rknnlite.Context(conv_relu_model("rk3588"), target_platform="rk3566") as ctx:
        twin = ctx.dup()
        with pytest.raises(InvalidParamError, match="RK3566"):
            twin.set_core_mask(CoreMask.CORE_0)
        twin.close()


# -- helpers of runtime.cores ---------------------------------------------------------------

@pytest.mark.parametrize("platform, mask, expected", [
    ("rk3588", CoreMask.AUTO, (0,)), ("rk3588", CoreMask.CORE_1, (1,)), ("rk3588", CoreMask.CORE_0_1, (0, 1)),
    ("rk3588", CoreMask.CORE_0_1_2, (0, 1, 2)), ("rk3588", CoreMask.ALL, (0, 1, 2)), ("rk3576", CoreMask.ALL, (0, 1)),
])
def test_mask_cores(platform, mask, expected):
    assert cores.mask_cores(platform, mask) == expected


@pytest.mark.parametrize("platform, mask, expected, warns", [
    ("rk3576", 4, 1, True), ("rk3576", 7, 3, True), ("rk3576", 2, 2, False), ("rk3588", 7, 7, False),
])
def test_lite2_remap(platform, mask, expected, warns):
    remapped, message = cores.lite2_remap(platform, mask)
    assert remapped == expected and bool(message) == warns


def test_model_platform():
    class Model:  # the ModelInfo member model_platform reads
        def __init__(self, *targets):
            self.target_platforms = targets

    assert cores.model_platform(Model("RK3576", "rk3588")) == "rk3576"
    assert cores.model_platform(Model("RK3576"), "RK3566") == "rk3566"
    assert cores.model_platform(Model()) == ""


# -- RKNNLite -------------------------------------------------------------------------------

@pytest.mark.parametrize("platform, mask, ret, threads", [
    ("rk3588", RKNNLite.NPU_CORE_0_1, 0, 2), ("rk3588", RKNNLite.NPU_CORE_0_1_2, 0, 3),
    ("rk3588", RKNNLite.NPU_CORE_AUTO, 0, 1), ("rk3576", RKNNLite.NPU_CORE_0_1_2, 0, 2),
    ("rk3576", RKNNLite.NPU_CORE_2, 0, 1), ("rk3588", 6, -1, None), ("rk3566", RKNNLite.NPU_CORE_AUTO, 0, 1),
    ("rk3566", RKNNLite.NPU_CORE_0, -1, None),
])
def test_init_runtime_core_mask_reaches_the_context(conv_relu_model, many_cpus, caplog, platform, mask, ret, threads):
    rk = RKNNLite()
    try:
        assert rk.load_rknn(conv_relu_model(platform)) == 0
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            assert rk.init_runtime(core_mask=mask) == ret
        if threads is not None:
            assert rk._ctx._backend.threads == threads
        if platform == "rk3576" and mask in (RKNNLite.NPU_CORE_2, RKNNLite.NPU_CORE_0_1_2):
            assert "RK3576 has 2 NPU cores" in caplog.text
        if ret == -1 and platform == "rk3588":
            assert "Invalid core_mask" in caplog.text
    finally:
        rk.release()


def test_core_platform_is_public(conv_relu_model):
    with rknnlite.Context(conv_relu_model("rk3588")) as ctx:
        assert ctx.core_platform == "rk3588"
        with ctx.dup() as twin:
            assert twin.core_platform == "rk3588"
    with rknnlite.Context(conv_relu_model("rk3588"), target_platform="rk3576") as ctx:
        assert ctx.core_platform == "rk3576"

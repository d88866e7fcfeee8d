"""Weight sharing between contexts of different models (``Context(share_weights_with=...)``):
the toolkit's ``config(remove_weight=True)`` weight-less build, run off-board beside the full
model, and ``RKNN_FLAG_SHARE_WEIGHT_MEM`` with ``rknn_init_extend.ctx`` against the fake
librknnrt."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.constants import InitFlag
from rknnlite.errors import InvalidParamError, ModelInvalidError
from rknnlite.model.loader import load_model

from fake_model import FakeTensor, fake_model_bytes, fake_node

onnx = pytest.importorskip("onnx", reason="building the models needs the onnx package")

from onnx import helper  # noqa: E402
from onnx_builders import init, model, vi  # noqa: E402

from rknnlite.toolkit import RKNN  # noqa: E402


def _conv_net(size: int, seed: int = 0, width: int = 8):
    """Conv(3->width, 3x3) + Relu + Conv(width->4, 1x1) on a ``size`` x ``size`` image: the
    same network (and weights) at any input size."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((width, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((4, width, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    return model(nodes, [vi("x", [1, 3, size, size])], [vi("y", [1, 4, size, size])],
                 [init("w1", w1), init("w2", w2)])


def _build(net, remove_weight=False, float_dtype="float16", **config) -> bytes:
    rk = RKNN()
    try:
        assert rk.config(target_platform="rk3588", float_dtype=float_dtype, remove_weight=remove_weight,
                         **config) == 0
        assert rk.load_onnx(net) == 0
        assert rk.build() == 0
        return rk._model_bytes
    finally:
        rk.release()


@pytest.fixture(scope="module")
def twins():
    """(full model at 16x16, weight-less model of the same network at 8x8, full 8x8 reference)."""
    return _build(_conv_net(16)), _build(_conv_net(8), remove_weight=True), _build(_conv_net(8))


def test_remove_weight_leaves_the_weights_out(twins):
    full, light, reference = twins
    loaded = load_model(light).model
    assert sorted(loaded.shared) == ["w1", "w2"]
    assert len(light) < len(reference)
    assert not load_model(reference).model.shared


def test_weightless_model_runs_with_the_shared_weights(twins):
    full, light, reference = twins
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with rknnlite.Context(full) as a, rknnlite.Context(light, share_weights_with=a) as b, \
            rknnlite.Context(reference) as ref:
        assert b.flags & InitFlag.SHARE_WEIGHT_MEM
        want = ref.run([x], data_format="nchw")[0]
        np.testing.assert_array_equal(b.run([x], data_format="nchw")[0], want)
        # the weights are the full context's arrays, not copies
        shared = b._backend.model.graph.constants
        for name in load_model(light).model.shared:
            assert shared[name] is a._backend.model.graph.constants[name]
        assert b.mem_size().total_weight_size < ref.mem_size().total_weight_size
        a.run([np.zeros((1, 3, 16, 16), np.float32)], data_format="nchw")  # the donor stays usable


def test_weightless_model_alone_is_refused(twins):
    with pytest.raises(ModelInvalidError, match="remove_weight=True.*share_weights_with"):
        rknnlite.Context(twins[1])


def test_sharing_refusals(twins):
    full, light, reference = twins
    other = _build(_conv_net(16, width=6))
    with rknnlite.Context(full) as a:
        with pytest.raises(ModelInvalidError, match="not built with config\\(remove_weight=True\\)"):
            rknnlite.Context(reference, share_weights_with=a)
        with pytest.raises(InvalidParamError, match="must be a Context"):
            rknnlite.Context(light, share_weights_with=full)
        with pytest.raises(InvalidParamError, match="SHARE_WEIGHT_MEM needs the context"):
            rknnlite.Context(light, flags=InitFlag.SHARE_WEIGHT_MEM)
    with rknnlite.Context(other) as b:  # another network: 6 channels where the model has 8
        with pytest.raises(ModelInvalidError, match=r"needs weight 'w1' as float32 \[8, 3, 3, 3\]"):
            rknnlite.Context(light, share_weights_with=b)


def test_simulator_runs_a_weightless_build_with_its_weights():
    rk = RKNN()
    try:
        assert rk.config(target_platform="rk3588", remove_weight=True) == 0
        assert rk.load_onnx(_conv_net(8)) == 0
        assert rk.build() == 0
        assert rk.init_runtime() == 0
        x = np.ones((1, 8, 8, 3), np.float32)
        assert rk.inference([x])[0].shape == (1, 4, 8, 8)
    finally:
        rk.release()
    bad = RKNN()
    assert bad.config(target_platform="rk3588", remove_weight="yes") == -1
    bad.release()


# -- the npu backend (fake librknnrt) --------------------------------------------------------------

def _scale_model(size: int, weight):
    """Fake model y = x * weight; ``weight="shared"`` leaves it out (a remove_weight build)."""
    x, y = FakeTensor("x", (1, 3, size, size)), FakeTensor("y", (1, 3, size, size))
    return fake_model_bytes([x], [y], [fake_node("mul", ["x"], "y", const=weight, name="scale")])


def test_npu_share_weight_mem_passes_the_other_context(fake_npu):
    a = rknnlite.Context(_scale_model(8, 3.0), backend="npu")
    b = rknnlite.Context(_scale_model(4, "shared"), share_weights_with=a)
    assert b.backend == "npu"
    init = fake_npu.calls("rknn_init")[-1]
    assert "flag=0x20" in init and "extend=1" in init
    x = np.full((1, 4, 4, 3), 2.0, np.float32)
    np.testing.assert_allclose(b.run([x])[0], np.full((1, 3, 4, 4), 6.0))
    assert b.mem_size().total_weight_size == 0 < a.mem_size().total_weight_size
    a.close()  # the donor's rknn_destroy waits for b
    assert fake_npu.live("contexts") == 2
    np.testing.assert_allclose(b.run([x])[0], 6.0)
    b.close()
    assert fake_npu.live("contexts") == 0


def test_npu_weightless_model_without_sharing_fails_at_init(fake_npu):
    with pytest.raises(ModelInvalidError):
        rknnlite.Context(_scale_model(4, "shared"), backend="npu")
    assert any("has no weights" in m for m in fake_npu.messages())


def test_npu_and_software_contexts_do_not_share(fake_npu, twins):
    with rknnlite.Context(_scale_model(8, 3.0), backend="npu") as a:
        with pytest.raises(InvalidParamError, match="npu backend"):
            rknnlite.Context(twins[1], share_weights_with=a)
        with pytest.raises(InvalidParamError, match="must run there too"):
            rknnlite.Context(_scale_model(4, "shared"), backend="software", share_weights_with=a)


def test_npu_dup_of_a_sharing_context_keeps_the_weights_alive(fake_npu):
    a = rknnlite.Context(_scale_model(8, 5.0), backend="npu")
    b = rknnlite.Context(_scale_model(4, "shared"), share_weights_with=a)
    twin = b.dup()
    a.close()
    b.close()
    assert fake_npu.live("contexts") == 2  # the twin and the weights' context
    np.testing.assert_allclose(twin.run([np.ones((1, 4, 4, 3), np.float32)])[0], 5.0)
    twin.close()
    assert fake_npu.live("contexts") == 0


def test_software_donor_closed_first(twins):
    full, light, reference = twins
    a = rknnlite.Context(full)
    b = rknnlite.Context(light, share_weights_with=a)
    a.close()
    x = np.ones((1, 3, 8, 8), np.float32)
    with rknnlite.Context(reference) as ref:
        np.testing.assert_array_equal(b.run([x], data_format="nchw")[0], ref.run([x], data_format="nchw")[0])
    b.close()

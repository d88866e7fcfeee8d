"""Compiled runs call a one-image Conv's native kernel directly (``conv.bind``): gather
GEMMs that take the image as it is, depthwise convs, and Winograd convs run as bands (or as
one band) in one native call.  The direct call gives the step loop's values bit for bit, on
any thread count (sharing a big layer out as the full kernel does), and hands over to the
full kernel for other inputs than the node's constants."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.ops import conv as conv_module
from rknnlite.model.graph import Graph, Node

#: (name, input channels, output channels, kernel, group, stride, pads, bound directly)
LAYERS = [
    ("pointwise", 16, 24, 1, 1, 1, 0, True),
    ("pointwise-relu6", 8, 40, 1, 1, 1, 0, True),
    ("grouped-1x1", 12, 24, 1, 3, 1, 0, True),
    ("depthwise", 16, 16, 3, 16, 1, 1, True),
    ("depthwise-strided", 16, 16, 3, 16, 2, 1, True),
    ("strided-3x3", 8, 16, 3, 1, 2, 1, False),  # stride phases: the full kernel
]


def _graph(c: int, m: int, k: int, group: int, stride: int, pad: int, seed: int = 0, **extra) -> Graph:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((m, c // group, k, k)) * 0.3).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"group": group, "strides": [stride, stride], "pads": [pad] * 4, "kernel_shape": [k, k], **extra}
    nodes = [Node("Conv", "conv", ["x", "w", "b"], ["c"], attrs), Node("Clip", "clip", ["c", "lo", "hi"], ["y"])]
    return Graph(nodes, ["x"], ["y"], {"w": w, "b": b, "lo": np.float32(0), "hi": np.float32(6)})


def _feed(c: int, size: int, seed: int):
    return [np.random.default_rng(seed).standard_normal((1, c, size, size)).astype(np.float32)]


class _KernelCalls:
    """Counts the calls that reach the full Conv kernel through the module's name (the
    direct calls' hand-over); the step loop calls the registered function itself."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = conv_module.conv

        def counted(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(conv_module, "conv", counted)


@pytest.mark.parametrize("name, c, m, k, group, stride, pad, direct", LAYERS, ids=[row[0] for row in LAYERS])
@pytest.mark.parametrize("float_dtype", ["float16", "float32"])
def test_a_compiled_conv_equals_the_step_loop(monkeypatch, float_dtype, name, c, m, k, group, stride, pad, direct):
    ex = Executor(_graph(c, m, k, group, stride, pad), float_dtype)
    state = ex.new_state(threads=1)
    state.run(_feed(c, 13, 0))
    program = next(iter(state._plans.values())).program
    assert program is not None
    calls = _KernelCalls(monkeypatch)
    for seed in (1, 2):
        reference = ex.run(_feed(c, 13, seed))  # the unplanned step loop
        np.testing.assert_array_equal(state.run(_feed(c, 13, seed))[0], reference[0])
    assert state._last is program
    if direct:
        assert calls.count == 0  # the direct call did the work, not a hand-over to the full kernel
    bound = KERNELS["Conv"].fn.bind(ex.steps[0].attrs, [((1, c, 13, 13), np.dtype(np.float32)),
                                                         (ex.graph.constants["w"].shape, np.dtype(np.float32)),
                                                         ((m,), np.dtype(np.float32))],
                                    [np.empty((1, m, -(-13 // stride), -(-13 // stride)), np.float32)])
    assert (bound is not None) == direct


def test_a_big_gemm_on_two_threads_is_shared_out_by_the_direct_call(monkeypatch):
    ex = Executor(_graph(64, 128, 1, 1, 1, 0), "float32")
    state = ex.new_state(threads=2)
    state.run(_feed(64, 56, 0))
    calls = _KernelCalls(monkeypatch)
    reference = ex.run(_feed(64, 56, 1))
    state.pool.take_counts()
    # both threads take part, no hand-over; on a loaded machine one thread may take every chunk of a
    # run before the other wakes, so runs are sampled (none may hand over) until both took part: 20 were
    # not always enough beside another test run on the same two cores
    for _ in range(300):
        np.testing.assert_array_equal(state.run(_feed(64, 56, 1))[0], reference[0])
        counts = state.pool.take_counts()
        if all(counts):
            break
    assert calls.count == 0 and all(counts), counts
    state.set_threads(1)
    np.testing.assert_array_equal(state.run(_feed(64, 56, 1))[0], reference[0])
    assert calls.count == 0


def test_other_weights_than_the_nodes_constants_go_to_the_full_kernel():
    graph = _graph(16, 24, 1, 1, 1, 0)
    w, b = graph.constants["w"], graph.constants["b"]
    attrs = {"group": 1, "strides": [1, 1], "pads": [0] * 4, "kernel_shape": [1, 1]}
    spec = KERNELS["Conv"]
    attrs = spec.prepare(dict(attrs, _opset=17), [None, w, b])
    out = [np.empty((1, 24, 5, 5), np.float32)]
    call, extra = spec.fn.bind(attrs, [((1, 16, 5, 5), np.dtype(np.float32)), (w.shape, np.dtype(np.float32)),
                                       (b.shape, np.dtype(np.float32))], out)
    x = _feed(16, 5, 3)[0]
    other = (w * 2).astype(np.float32)
    call(x, other, b, *extra)
    expected = np.einsum("mc,nchw->nmhw", other[:, :, 0, 0], x) + b[None, :, None, None]
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size, banded", [(13, False), (56, True)])
def test_a_compiled_winograd_conv_is_one_native_call(monkeypatch, size, banded):
    if conv_module._ISA == 0:
        pytest.skip("no Winograd micro-kernels on this CPU")
    if banded:  # bands of a few tile rows even for this small layer
        monkeypatch.setattr(conv_module, "_WINO_V_CACHE", 0)
        monkeypatch.setattr(conv_module, "_WINO_BAND_MIN_TILES", 1)
        monkeypatch.setattr(conv_module, "_WINO_V_BAND", 1)
    ex = Executor(_graph(32, 48, 3, 1, 1, 1, _winograd="always"), "float32")
    state = ex.new_state(threads=1)
    state.run(_feed(32, size, 0))
    g = next(iter(ex.steps[0].attrs["_conv"].geoms.values()))
    assert g.path == "winograd" and (g.wbands is not None) == banded and (g.wband_whole is None) == banded
    calls = _KernelCalls(monkeypatch)
    reference = ex.run(_feed(32, size, 1))  # the unplanned step loop
    np.testing.assert_array_equal(state.run(_feed(32, size, 1))[0], reference[0])
    assert calls.count == 0
    # two threads: the direct call shares the work out as the full kernel would
    state.set_threads(2)
    state.run(_feed(32, size, 0))  # plans again
    np.testing.assert_array_equal(state.run(_feed(32, size, 1))[0], reference[0])
    assert calls.count == 0

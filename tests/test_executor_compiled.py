"""Compiled runs of the software executor: a fully planned signature runs as direct calls
(bound element-wise kernels, one-pass input staging) with the same results as the step
loop, and the storage kernels behind it."""

from __future__ import annotations

import gc
import tracemalloc
import warnings
import weakref

import numpy as np
import pytest

from rknnlite import InputInvalidError
from rknnlite._native.executor_kernels import (copy_fake_quant, copy_round_fp16, fake_quant_inplace,
                                               round_fp16_inplace)
from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.ops import KERNELS, KernelSpec
from rknnlite.backends.software.ops.elementwise import quiet
from rknnlite.model.graph import Graph, Node
from rknnlite.model.spec import QuantParams


def mixed_graph() -> Graph:
    """Bound ops (Add, Mul, Sub, Div, Abs, Max, Greater), kernel-called ones (Relu, Transpose,
    Where, Cast, Mean) and an integer side branch fed as it is."""
    k = np.array([1.7, -0.3, 2.5, 0.1], np.float32)
    nodes = [
        Node("Add", "add", ["a", "b"], ["s"]),
        Node("Mul", "mul", ["s", "k"], ["m"]),
        Node("Sub", "sub", ["m", "a"], ["d"]),
        Node("Div", "div", ["d", "k"], ["q"]),
        Node("Abs", "abs", ["q"], ["p"]),
        Node("Max", "max", ["p", "s"], ["mx"]),
        Node("Relu", "relu", ["d"], ["r"]),
        Node("Greater", "gt", ["r", "mx"], ["g"]),
        Node("Where", "where", ["g", "r", "mx"], ["w"]),
        Node("Transpose", "tr", ["w"], ["t"], {"perm": [1, 0]}),
        Node("Mean", "mean", ["t", "t", "t"], ["y"]),
        Node("Cast", "cast", ["i"], ["ci"], {"to": 1}),
        Node("Add", "addi", ["ci", "b"], ["z"]),
        Node("Floor", "floor", ["i"], ["fi"]),
    ]
    return Graph(nodes, ["a", "b", "i"], ["y", "z", "fi", "g"], {"k": k})


def feeds(seed: int):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((3, 4)) * 300).astype(np.float32)
    b = rng.standard_normal((1, 4)).astype(np.float32)
    i = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    return [a, b, i]


@pytest.mark.parametrize("float_dtype", ["float16", "float32"])
def test_compiled_runs_equal_the_step_loop(float_dtype):
    ex = Executor(mixed_graph(), float_dtype)
    state = ex.new_state()
    state.run(feeds(0))  # plans and compiles
    program = state._plans[next(iter(state._plans))].program
    assert program is not None
    for seed in (1, 2, 3):
        reference = ex.run(feeds(seed))  # a fresh state: the unplanned step loop
        got = state.run(feeds(seed))
        assert state._last is program
        for r, g in zip(reference, got):
            assert r.dtype == g.dtype and r.shape == g.shape
            np.testing.assert_array_equal(g, r)


def test_profiled_runs_take_the_step_loop_and_agree():
    ex = Executor(mixed_graph(), "float16")
    state = ex.new_state()
    first = state.run(feeds(4))
    state.profiling = True
    profiled = state.run(feeds(4))
    assert state.last_profile is not None and len(state.last_profile) > len(ex.steps)
    for f, p in zip(first, profiled):
        np.testing.assert_array_equal(f, p)


def test_int8_grid_staging_and_outputs_in_compiled_runs():
    quant = {"x": QuantParams("int8", (0.02,), (3,)), "s": QuantParams("int8", (0.03,), (-5,)),
             "y": QuantParams("int8", (0.1,), (0,))}
    graph = Graph([Node("Add", "add", ["x", "c"], ["s"]), Node("Mul", "mul", ["s", "s"], ["y"])], ["x"], ["y"],
                  {"c": np.array([0.3, -0.2, 0.05, 1.0], np.float32)}, quant=quant)
    ex = Executor(graph, "float16")
    state = ex.new_state()
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    state.run([x])
    assert state._last is None and state.run([x]) is not None and state._last is not None
    np.testing.assert_array_equal(state.run([x])[0], ex.run([x])[0])
    grid = np.array(state.run([x])[0] / 0.1)
    np.testing.assert_allclose(grid, np.rint(grid), atol=1e-4)


def test_other_dtype_or_layout_of_the_same_shape_still_agrees():
    ex = Executor(mixed_graph(), "float16")
    state = ex.new_state()
    base = feeds(6)
    state.run(base)
    reference = ex.run(base)
    fortran = [np.asfortranarray(base[0])] + base[1:]  # same signature, staged the slow way
    half = [base[0].astype(np.float16)] + base[1:]  # another dtype: its own plan
    wide = [base[0].astype(np.float64)] + base[1:]
    for variant in (fortran, half, wide, fortran):
        want = ex.run(variant)
        for r, g in zip(want, state.run(variant)):
            np.testing.assert_array_equal(g, r)
    for r, g in zip(reference, state.run(base)):
        np.testing.assert_array_equal(g, r)


def test_compiled_runs_keep_no_reference_to_the_feeds():
    graph = Graph([Node("Floor", "f", ["i"], ["y"])], ["i"], ["y"])
    state = Executor(graph, "float16").new_state()
    i = np.arange(6, dtype=np.int64)
    state.run([i])
    fed = np.arange(6, dtype=np.int64)
    ref = weakref.ref(fed)
    np.testing.assert_array_equal(state.run([fed])[0], fed)
    assert state._last is not None
    del fed
    gc.collect()
    assert ref() is None


def test_floating_point_warnings_are_silenced_in_compiled_runs():
    graph = Graph([Node("Sub", "sub", ["a", "b"], ["d"]), Node("Div", "div", ["d", "b"], ["y"])], ["a", "b"], ["y"])
    state = Executor(graph, "float32").new_state()
    a = np.array([np.inf, 1.0, 0.0], np.float32)
    b = np.array([np.inf, 0.0, 0.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            y = state.run([a, b])[0]
    assert np.isnan(y[0]) and y[1] == np.inf and np.isnan(y[2])
    assert np.geterr()["invalid"] == "warn"  # the caller's error state is left as it was


def test_quiet_restores_the_callers_error_state_and_nests():
    before = np.geterr()
    with np.errstate(divide="raise"):
        with quiet():
            assert set(np.geterr().values()) == {"ignore"}
            with quiet():
                np.float32(1.0) / np.float32(0.0)
            assert set(np.geterr().values()) == {"ignore"}
        assert np.geterr()["divide"] == "raise"
    assert np.geterr() == before


def overriding(fn) -> KernelSpec:
    return KernelSpec("Relu", fn, out=True)


def test_a_failing_kernel_in_a_compiled_run_names_the_node_and_the_state_stays_usable():
    def picky(inputs, attrs, out=None):
        if inputs[0][0, 0] < 0:
            raise ValueError("negative first element")
        return KERNELS["Relu"].fn(inputs, attrs, out)

    graph = Graph([Node("Add", "add", ["a", "b"], ["s"]), Node("Relu", "fussy", ["s"], ["y"])], ["a", "b"], ["y"])
    state = Executor(graph, "float32").new_state()
    state.use_kernels({1: overriding(picky)})
    ones = np.ones((2, 2), np.float32)
    state.run([ones, ones])
    state.run([ones, ones])
    assert state._last is not None
    with pytest.raises(InputInvalidError, match=r"node 'fussy' \(Relu\) failed on inputs \[\[2, 2\]\].*negative"):
        state.run([-3 * ones, ones])
    np.testing.assert_array_equal(state.run([ones, ones])[0], 2 * ones)


def test_a_kernel_returning_a_new_array_is_copied_into_its_planned_buffer():
    def fresh(inputs, attrs, out=None):
        return [np.maximum(inputs[0], 0)]  # ignores out

    graph = Graph([Node("Relu", "r", ["x"], ["t"]), Node("Mul", "m", ["t", "t"], ["y"])], ["x"], ["y"])
    state = Executor(graph, "float16").new_state()
    state.use_kernels({0: overriding(fresh)})
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
        h = x.astype(np.float16).astype(np.float32)
        t = np.maximum(h, 0)
        np.testing.assert_array_equal(state.run([x])[0], (t * t).astype(np.float16).astype(np.float32))


def test_compiled_runs_allocate_nothing_tensor_sized():
    graph = Graph([Node("Add", "add", ["a", "b"], ["s"]), Node("Mul", "mul", ["s", "a"], ["y"])], ["a", "b"], ["y"])
    state = Executor(graph, "float16").new_state()
    a, b = np.ones((1, 1, 256, 256), np.float32), np.full((1, 1, 256, 256), 2.0, np.float32)
    out = [np.empty((1, 1, 256, 256), np.float32)]
    state.run([a, b])
    state.run([a, b], out)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(5):
            state.run([a, b], out)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - base < 256 * 256 * 4 // 8
    np.testing.assert_array_equal(out[0], 3.0)
    assert state.staging_bytes == 0  # 4-D float32 inputs are read in place: float16 mode does not round them


def test_bound_elementwise_ops_compute_what_their_kernels_do():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 5)) * 4).astype(np.float32)
    y = (rng.standard_normal((1, 5)) * 4).astype(np.float32)
    xi, yi = rng.integers(-9, 9, (3, 5)).astype(np.int32), rng.integers(1, 9, (1, 5)).astype(np.int32)
    bound = 0
    for op, spec in sorted(KERNELS.items()):
        bind = getattr(spec.fn, "bind", None)
        if bind is None:
            continue
        for args in ([x], [x, y], [xi], [xi, yi], [x > 0, y > 0]):
            try:
                want = spec.fn(args, {})
            except Exception:
                continue
            out = [np.empty_like(want[0])]
            binding = bind({}, [(a.shape, a.dtype) for a in args], out)
            if binding is None:
                continue
            call, extra = binding
            with quiet():
                call(*args, *extra)
            np.testing.assert_array_equal(out[0], want[0], err_msg=op)
            bound += 1
    assert bound >= 20
    int_floor = KERNELS["Floor"].fn.bind({}, [((3, 5), np.dtype(np.int32))], [np.empty((3, 5), np.int32)])
    assert int_floor is None  # integers pass through Floor: not a ufunc call
    assert KERNELS["Div"].fn.bind({}, [((3, 5), xi.dtype), ((1, 5), yi.dtype)], [np.empty((3, 5), np.int32)]) is None
    assert KERNELS["Max"].fn.bind({}, [((3,), x.dtype)] * 3, [np.empty(3, np.float32)]) is None


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 33, 1000])
def test_copy_round_fp16_equals_copy_then_round(n):
    rng = np.random.default_rng(n)
    src = (rng.standard_normal((n,)) * 10.0 ** rng.integers(-8, 6, n)).astype(np.float32)
    src[: min(n, 3)] = [np.inf, np.nan, 70000.0][: min(n, 3)]
    dst = np.full(n, 7.0, np.float32)
    assert copy_round_fp16(src.reshape(1, -1) if n else src, dst) is True
    ref = src.copy()
    round_fp16_inplace(ref)
    np.testing.assert_array_equal(dst.view(np.uint32), ref.view(np.uint32))
    assert n < 3 or src[2] == 70000.0  # the source is not touched


def test_copy_round_fp16_declines_what_it_cannot_copy():
    dst = np.full((2, 3), 7.0, np.float32)
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    for bad in (src.T, src.astype(np.float16), src.astype(np.float64), src[:, :2], src.astype(">f4"), [1.0] * 6):
        assert copy_round_fp16(bad, dst) is False
        assert copy_fake_quant(bad, dst, 0.5, 0) is False
    assert (dst == 7.0).all()
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros((2, 3), np.float32)
        ro.flags.writeable = False
        copy_round_fp16(src, ro)
    with pytest.raises(ValueError, match="scale must be positive"):
        copy_fake_quant(src, dst, 0.0, 0)


def test_copy_fake_quant_equals_copy_then_snap():
    src = (np.random.default_rng(12).standard_normal((4, 9)) * 3).astype(np.float32)
    dst = np.empty_like(src)
    assert copy_fake_quant(src, dst, 0.05, 7, -128, 127) is True
    ref = src.copy()
    fake_quant_inplace(ref, 0.05, 7, -128, 127)
    np.testing.assert_array_equal(dst, ref)


def test_in_place_kernels_take_any_c_contiguous_float32_array():
    x = np.full((2, 3, 4), 1.0001, np.float32)
    round_fp16_inplace(x)
    assert (x == 1.0).all()
    fake_quant_inplace(x, 0.3, 0)
    np.testing.assert_array_equal(x, np.float32(0.3) * 3)
    for bad in (np.zeros((3, 4), np.float32).T, np.zeros(4, np.float64)):
        with pytest.raises(ValueError):
            round_fp16_inplace(bad)
        with pytest.raises(ValueError):
            fake_quant_inplace(bad, 0.1, 0)

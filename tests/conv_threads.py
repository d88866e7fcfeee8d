"""The software backend's Conv kernel on a worker pool of a chosen size: layers and a runner
for the tests that check every multithreaded split gives the one-thread result bit for bit."""

import time

import numpy as np

from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.parallel import WorkerPool, WorkRecorder, using

CONV = KERNELS["Conv"]


def conv_case(C, M, size, k, s, residual, seed=0, weight_scale=0.1, winograd=False):
    """``(inputs, attrs, output_shape)`` of a prepared Conv+Relu: a 1xCxsize x size input, M kxk
    filters with stride ``s`` and "same" padding, a residual input when ``residual``;
    ``winograd`` sets ``_winograd`` (None: leave the kernel's choice)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, C, size, size)).astype(np.float32)
    w = (rng.standard_normal((M, C, k, k)) * weight_scale).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    out = (size + 2 * (k // 2) - k) // s + 1
    attrs = {"strides": [s, s], "pads": [k // 2] * 4, "_activation": "Relu"}
    if winograd is not None:
        attrs["_winograd"] = winograd
    inputs = [x, w, b]
    if residual:
        attrs["_residual"] = True
        inputs.append(rng.standard_normal((1, M, out, out)).astype(np.float32))
    attrs = CONV.prepare(attrs, inputs[:3] + [None] * (len(inputs) - 3))
    return inputs, attrs, (1, M, out, out)


def run_kernel(kernel, inputs, attrs, shape, threads, record=False):
    """``kernel``'s output of ``shape`` (NaN-initialised, so a missed element shows) on
    ``threads`` workers; with ``record``, also the work items each thread ran
    (``WorkRecorder.take()``)."""
    y = np.full(shape, np.nan, np.float32)
    pool = WorkerPool(threads)
    try:
        runner = WorkRecorder(pool) if record else pool
        with using(runner):
            kernel.fn(inputs, attrs, [y])
    finally:
        pool.close()
    return (y, runner.take()) if record else y


def run_conv(inputs, attrs, shape, threads, record=False):
    """:func:`run_kernel` of the Conv kernel."""
    return run_kernel(CONV, inputs, attrs, shape, threads, record)


def assert_every_thread_takes_part(kernel, inputs, attrs, shape, one):
    """Two threads give ``one`` (the one-thread result) bit for bit, and both threads run
    work items.  A thread the OS delays (other processes on the cores) may find every
    item taken, so it retries, for up to a minute on a loaded machine, before failing."""
    deadline = time.monotonic() + 60
    while True:
        y, counts = run_kernel(kernel, inputs, attrs, shape, 2, record=True)
        np.testing.assert_array_equal(y, one)
        if all(c > 0 for c in counts):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"a thread ran no work item: {counts}")


def assert_threads_give_the_one_thread_conv(inputs, attrs, shape, threads, k, s):
    """``threads`` workers give the one-thread Conv output bit for bit, and it is the
    convolution of :func:`conv_case`'s layer (kernel ``k``, stride ``s``)."""
    one = run_conv(inputs, attrs, shape, 1)
    assert not np.isnan(one).any()
    np.testing.assert_array_equal(run_conv(inputs, attrs, shape, threads), one)
    np.testing.assert_allclose(one, reference_conv(inputs, k, s, shape), rtol=1e-4, atol=1e-4)


def reference_conv(inputs, k, s, shape):
    """The float64 result of :func:`conv_case`'s layer: Conv (k x k, stride s, "same" padding)
    + bias (+ the residual input) + Relu, of ``shape``."""
    x, w, b = inputs[:3]
    p = k // 2
    xp = np.pad(x[0].astype(np.float64), ((0, 0), (p, p), (p, p)))
    out = shape[2]
    ref = np.zeros(shape[1:])
    for i in range(k):
        for j in range(k):
            ref += np.einsum("mc,chw->mhw", w[:, :, i, j], xp[:, i:i + s * out:s, j:j + s * out:s])
    ref += b[:, None, None]
    if len(inputs) > 3:
        ref += inputs[3][0]
    return np.maximum(ref, 0)[None]

"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from typing import Callable, List, Sequence


def machine() -> str:
    """One line naming the CPU (model, usable CPUs), the data caches the kernels block for and
    the conv kernels' SIMD path (the CPU's best, or ``RKNNLITE_ISA``'s), for a table header,
    e.g. ``CPU: AMD EPYC, 2 CPUs usable; caches L1d 32K, L2 512K, L3 32768K (sysfs); conv
    kernels avx2``."""
    import rknnlite.backends.software.ops.conv  # noqa: F401  (applies RKNNLITE_ISA)
    from rknnlite._native import conv_kernels
    from rknnlite.backends.software.host_cpu import cpu_model, detect_caches
    from rknnlite.backends.software.isa import ISA_NAMES
    from rknnlite.tensors.topology import usable_cpus

    return (f"CPU: {cpu_model()}, {usable_cpus()} CPUs usable; caches {detect_caches().describe()}; "
            f"conv kernels {ISA_NAMES[conv_kernels.gemm_isa()]}")


def median_ms(fn: Callable[[], object], runs: int, warmup: int = 0) -> float:
    """Median wall time of ``fn()`` over ``runs`` calls, in milliseconds, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def interleaved_ms(fns: Sequence[Callable[[], object]], runs: int, warmup: int = 0,
                   clocks: Sequence[Callable[[], float]] = ()) -> List[List[float]]:
    """Times (ms) of every ``fns[i]()`` over ``runs`` rounds, each round calling every
    function once in turn (so load from other processes hits them alike), after ``warmup``
    rounds.  ``clocks[i]`` (default ``time.perf_counter``: wall time) is the clock of
    ``fns[i]``; ``time.thread_time`` measures only the calling thread's CPU time, the
    right clock for single-threaded work on a machine shared with other processes.
    Returns one list of ``runs`` times per function."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: List[List[float]] = [[] for _ in fns]
    clocks = list(clocks) + [time.perf_counter] * (len(fns) - len(clocks))
    for _ in range(runs):
        for fn, clock, out in zip(fns, clocks, times):
            t = clock()
            fn()
            out.append((clock() - t) * 1e3)
    return times


def median_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median over rounds of ``a[i] / b[i]`` (times of two functions from one interleaved run)."""
    return statistics.median(x / y for x, y in zip(a, b))


def ort_one_node(op: str, x, attrs: dict, initializers=(), opset: int = 17):
    """``(run, out)``: a callable running a one-node onnxruntime model ``op(x, *initializers)``
    with one intra- and one inter-op thread and its output bound in advance (so a run only
    computes), and the array it writes.  ``initializers`` are ``(name, array)`` pairs."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node(op, ["x"] + [name for name, _ in initializers], ["y"], **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, name) for name, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    out = np.empty_like(y)
    binding.bind_output("y", "cpu", 0, np.float32, out.shape, out.ctypes.data)

    def run():
        sess.run_with_iobinding(binding)
        return out  # the run writes into out's memory: holding it here keeps it alive as long as run

    return run, out


def sgemm_scaling_pair(n: int = 512, per_thread: int = 2):
    """``(one, two, close)``: ``one()`` runs ``2 * per_thread`` float32 n x n matrix products in
    the calling thread; ``two()`` runs the same products split over two Python threads at once
    (numpy releases the GIL in BLAS; BLAS itself limited to one thread by the caller).  Their
    wall-time ratio is the machine's own two-thread scaling of plain sgemm, the reference of a
    runtime's two-thread speed-up measured in the same rounds.  ``close()`` ends the threads."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    outs = [np.empty((n, n), np.float32) for _ in range(2)]
    pool = ThreadPoolExecutor(max_workers=2)

    def work(k: int) -> None:
        for _ in range(per_thread):
            np.matmul(a, b, out=outs[k])

    def one() -> None:
        work(0)
        work(1)

    def two() -> None:
        for f in [pool.submit(work, 0), pool.submit(work, 1)]:
            f.result()

    return one, two, pool.shutdown

"""Memory stability: no RSS growth over 10,000 inferences or 1,000 load/release cycles,
and no lasting Python allocation per run.

The RSS loops run in a fresh interpreter each (clean numbers: no other test's heap), and
measure after a warm-up, so only growth that continues call after call counts (the
official package is reported to leak about 42 kB per call: 420 MB over 10,000 calls).
The cycles also check that open file descriptors and threads come back to where they were.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import rknnlite
from rknnlite.api import RKNNLite

MB = 1 << 20
KB = 1 << 10

SCRIPT = textwrap.dedent(
    """
    import gc, json, logging, os, sys
    import numpy as np, psutil
    import rknnlite
    from rknnlite.api import RKNNLite
    from rknnlite.constants import CoreMask

    scenario, path, log_file, warmup, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    logging.getLogger("rknnlite").setLevel(logging.ERROR)  # RKNNLite() warns its version once per object
    proc = psutil.Process()
    x = np.random.default_rng(0).integers(0, 256, (1, 3, 8, 8)).astype(np.float32)  # pixel values
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(np.uint8)

    def context_run():
        ctx = rknnlite.Context(path)
        return lambda: ctx.run([x], data_format="nchw")

    def inference():
        rk = RKNNLite()
        assert rk.load_rknn(path) == 0 and rk.init_runtime() == 0
        return lambda: rk.inference([nhwc])

    def rknnlite_cycle():
        def cycle():
            rk = RKNNLite(verbose_file=log_file)
            assert rk.load_rknn(path) == 0 and rk.init_runtime() == 0
            assert rk.inference([nhwc]) is not None
            rk.release()
        return cycle

    def context_cycle():
        def cycle():
            ctx = rknnlite.Context(path)
            ctx.set_core_mask(CoreMask.CORE_0_1)  # worker threads too
            ctx.run([x], data_format="nchw")
            twin = ctx.dup()
            twin.run([x], data_format="nchw")
            twin.close()
            ctx.close()
        return cycle

    def zero_copy(fd_backed):
        # a camera-style binding: UINT8 NHWC frame (rows w_stride apart) in, FLOAT32 NCHW out
        ctx = rknnlite.Context(path)
        expected = ctx.run([x], data_format="nchw")[0]
        attr_in = ctx.native_inputs[0].replace(type=rknnlite.TensorType.UINT8)
        attr_out = ctx.outputs[0].replace(type=rknnlite.TensorType.FLOAT32)  # a float16 model's says FLOAT16
        n, h, w, c = attr_in.dims

        def cycle():
            fd = os.memfd_create("frame") if fd_backed else -1
            try:
                if fd_backed:
                    os.ftruncate(fd, attr_in.size_with_stride)
                    frame = ctx.create_mem_from_fd(fd, attr_in.size_with_stride)
                else:
                    frame = ctx.create_mem(attr_in.size_with_stride)
                out = ctx.create_mem(attr_out.size_with_stride)
                ctx.set_io_mem(frame, attr_in)
                ctx.set_io_mem(out, attr_out)
                frame.array(np.uint8, (n, h, attr_in.w_stride, c))[:, :, :w, :] = nhwc
                ctx.run_bound()
                assert np.array_equal(out.array(np.float32, attr_out.dims), expected)
                frame.destroy()
                out.destroy()
            finally:
                if fd_backed:
                    os.close(fd)
        return cycle

    def mem_cycle():
        return zero_copy(False)

    def fd_mem_cycle():
        return zero_copy(True)

    step = locals()[scenario]()
    for _ in range(warmup):
        step()
    gc.collect()
    rss, fds, threads = proc.memory_info().rss, proc.num_fds(), proc.num_threads()
    for _ in range(count):
        step()
    gc.collect()
    print(json.dumps(dict(growth=proc.memory_info().rss - rss, fds=proc.num_fds() - fds,
                          threads=proc.num_threads() - threads)))
    """
)


@pytest.fixture(scope="module")
def model_files(context_models, tmp_path_factory):
    """Small models as files (loaded from a path: memory-mapped): float16 and int8 Conv 3->4
    on (1, 3, 8, 8) with mean/std preprocessing."""
    folder = tmp_path_factory.mktemp("stability")
    paths = {}
    for name in ("conv_fp16", "conv_i8"):
        paths[name] = folder / f"{name}.rknn"
        paths[name].write_bytes(context_models[name])
    return paths


def measure(scenario: str, path, tmp_path, warmup: int, count: int) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, scenario, str(path), str(tmp_path / "verbose.log"),
                          str(warmup), str(count)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("model", ["conv_fp16", "conv_i8"])
@pytest.mark.parametrize("scenario", ["context_run", "inference"])
def test_10000_inferences_do_not_grow_rss(model_files, tmp_path, scenario, model):
    m = measure(scenario, model_files[model], tmp_path, warmup=300, count=10_000)
    assert m["growth"] < 2 * MB, f"{scenario}: RSS grew {m['growth'] / KB:.0f} kB over 10,000 calls " \
                                 f"({m['growth'] / 10_000:.1f} bytes per call)"


@pytest.mark.parametrize("scenario", ["rknnlite_cycle", "context_cycle", "mem_cycle", "fd_mem_cycle"])
def test_1000_load_release_cycles_do_not_grow(model_files, tmp_path, scenario):
    # rknnlite_cycle: RKNNLite load_rknn/init_runtime/inference/release (with a verbose_file);
    # context_cycle: Context create/set_core_mask/run/dup/run/close;
    # mem_cycle / fd_mem_cycle: on one context, create_mem (or create_mem_from_fd on a new
    # memfd) for a camera frame and the output, set_io_mem both, run_bound, destroy both.
    m = measure(scenario, model_files["conv_fp16"], tmp_path, warmup=50, count=1000)
    assert m["growth"] < 2 * MB, f"{scenario}: RSS grew {m['growth'] / KB:.0f} kB over 1,000 cycles"
    assert m["fds"] == 0, f"{scenario}: {m['fds']} file descriptors left open after 1,000 cycles"
    assert m["threads"] == 0, f"{scenario}: {m['threads']} threads left running after 1,000 cycles"


def _lasting_bytes(call, runs: int = 500):
    """Bytes of Python-tracked allocations still alive after ``runs`` calls (results
    dropped), and the top allocation sites for a failure message.

    ``gc.collect()`` before both readings also empties CPython's object free lists: a
    freed small tuple parked there stays "allocated" for tracemalloc, and the free list
    of 1-tuples alone fills up to 2,000 entries (~90 kB) over the first traced calls."""
    for _ in range(20):
        call()
    tracemalloc.start(5)
    try:
        call()  # anything allocated once on first use under tracing
        gc.collect()
        before = tracemalloc.take_snapshot()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(runs):
            call()
        gc.collect()
        lasting = tracemalloc.get_traced_memory()[0] - base
        top = tracemalloc.take_snapshot().compare_to(before, "lineno")[:5]
    finally:
        tracemalloc.stop()
    return lasting, "\n".join(str(s) for s in top)


# test_executor.py checks the ExecutionState alone (no tensor-sized allocation per run);
# these check the public calls around it: Context.run's input conversion and output
# handling, and RKNNLite.inference's argument checks and frame counter.

def test_context_run_keeps_no_python_objects(context_models):
    x = np.random.default_rng(1).uniform(0, 255, (1, 8, 8, 3)).astype(np.float32)  # NHWC, as the input says
    with rknnlite.Context(context_models["conv_i8"]) as ctx:
        lasting, top = _lasting_bytes(lambda: ctx.run([x]))
    assert lasting < 2 * KB, f"{lasting} bytes still allocated after 500 runs:\n{top}"


def test_rknnlite_inference_keeps_no_python_objects(model_files):
    x = np.random.default_rng(1).integers(0, 255, (1, 8, 8, 3), dtype=np.uint8)
    rk = RKNNLite()
    try:
        assert rk.load_rknn(str(model_files["conv_fp16"])) == 0 and rk.init_runtime() == 0
        lasting, top = _lasting_bytes(lambda: rk.inference([x]))
    finally:
        rk.release()
    assert lasting < 2 * KB, f"{lasting} bytes still allocated after 500 runs:\n{top}"

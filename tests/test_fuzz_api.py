"""Arguments of the wrong type or value never escape as a stray exception.

A seeded fuzz of the public call surfaces: the toolkit's ``RKNN`` and ``RKNNLite`` (Lite2's
contract: a failure returns -1 or None with the reason logged), :class:`rknnlite.Context` and
the pipeline's ``Pipeline`` and ``AsyncInferQueue`` and the ``vision`` helpers and decoders (a
failure raises an ``RKNNError`` naming the argument). Each call
gets one to three of its parameters set to an odd value (None, numbers out of range, NaN,
strings meant for another parameter, nested lists, arrays, dicts, bytes, objects) on an object
brought to the stage where the call is legal; afterwards the object must still run the model.
The regression tests beside the features (``test_toolkit_onnx.py``, ``test_rknn_lite.py``,
``test_context.py``, ``test_pipeline.py``, ``test_vision_*.py``) pin each case this fuzz found.
"""

from __future__ import annotations

import inspect
import logging
import random

import numpy as np
import pytest

import rknnlite
from rknnlite.api import RKNNLite
from rknnlite.demo import DEMO_MODEL_PATH
from rknnlite import vision
from rknnlite.pipeline import AsyncInferQueue, Pipeline

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.toolkit import RKNN  # noqa: E402

CALLS = 400

ODD = [None, 0, 1, -1, 2, 3.5, float("nan"), float("inf"), True, False, "", "x", "nchw", "nhwc", "rk3588", "w8a8",
       [], [None], [[]], [1], [0, 1], [[1, 2, 3]], [[1, 2, 3], [4, 5, 6]], ["a"], [[1, "a", 3]], {}, {"a": 1}, (1,),
       np.zeros(3, np.float32), np.zeros((1, 3, 8, 8), np.float32), np.zeros((1, 8, 8, 3), np.uint8), object(),
       b"abc", [np.zeros((1, 3, 8, 8), np.float32)], [np.zeros((8, 8, 3), np.float32)],
       [np.zeros((1, 8, 8, 3), np.float64)], [np.zeros((2, 8, 8, 3), np.float32)], 10**12, -10**12, 2**40,
       "dataset.txt", "/nonexistent/x.txt", [[1, 3, 8, 8]], [[1, 3, -1, 8]], [["1", 3, 8, 8]], [1, 3, 8, 8],
       0xFFFF, [True], [1.5], "m\0.rknn"]

#: toolkit method -> (its parameters, the stage it needs: 0 new, 1 loaded, 2 built, 3 running)
TOOLKIT = {
    "config": (["mean_values", "std_values", "quantized_dtype", "quantized_algorithm", "quantized_method",
                "quantized_hybrid_level", "target_platform", "quant_img_RGB2BGR", "float_dtype", "optimization_level",
                "custom_string", "dynamic_input", "remove_weight", "model_pruning", "sparse_infer",
                "auto_hybrid_cos_thresh", "auto_hybrid_euc_thresh", "inputs_yuv_fmt"], 0),
    "load_onnx": (["inputs", "input_size_list", "input_initial_val", "outputs"], 0),
    "build": (["do_quantization", "dataset", "rknn_batch_size", "auto_hybrid"], 1),
    "hybrid_quantization_step1": (["dataset", "rknn_batch_size", "proposal", "proposal_dataset_size",
                                   "custom_hybrid"], 1),
    "export_rknn": (["export_path", "cpp_gen_cfg"], 2),
    "init_runtime": (["target", "device_id", "perf_debug", "eval_mem", "async_mode", "core_mask",
                      "fallback_prior_device"], 2),
    "inference": (["inputs", "data_format", "inputs_pass_through", "get_frame_id", "data_type"], 3),
    "accuracy_analysis": (["inputs", "output_dir", "target", "device_id"], 2),
    "load_rknn": (["path"], 0),
    "codegen": (["output_path", "inputs", "overwrite"], 2),
}
#: the required arguments a call keeps unless the fuzz replaces them
TOOLKIT_REQUIRED = {"load_onnx": {"model": None}, "export_rknn": {"export_path": "m.rknn"},
                    "inference": {"inputs": None}, "accuracy_analysis": {"inputs": None},
                    "load_rknn": {"path": "m.rknn"}, "codegen": {"output_path": "cg"}}

LITE = {"load_rknn": (["path", "key_path"], 0), "init_runtime": (["target", "device_id", "async_mode", "core_mask"], 1),
        "inference": (["inputs", "data_type", "data_format", "inputs_pass_through", "get_frame_id",
                       "reuse_outputs"], 2),
        "list_support_target_platform": (["rknn_model"], 0)}
LITE_REQUIRED = {"load_rknn": {"path": str(DEMO_MODEL_PATH)}, "inference": {"inputs": None}}

CONTEXT = {"__init__": ["key", "backend", "target_platform", "flags", "custom_ops", "share_weights_with"],
           "run": ["inputs", "data_format", "pass_through", "want_float"], "query": ["cmd", "index"],
           "set_core_mask": ["mask"], "set_batch_core_num": ["n"], "set_input_shapes": ["shapes", "data_format"],
           "create_mem": ["size", "flags"], "create_mem_from_fd": ["fd", "size", "offset", "flags"],
           "perf_detail": ["as_text"], "register_custom_op": ["op", "shape_infer"]}
CONTEXT_REQUIRED = {"run": {"inputs": None}, "query": {"cmd": 1}, "set_core_mask": {"mask": 0},
                    "set_batch_core_num": {"n": 1}, "set_input_shapes": {"shapes": [[1, 32, 32, 3]]},
                    "create_mem": {"size": 64}, "create_mem_from_fd": {"fd": -1, "size": 64},
                    "register_custom_op": {"op": None}}

#: answers a fuzz may get that are each call's documented behaviour, not a stray exception:
#: the toolkit's board-only calls raise as the vendor's simulator does (test_toolkit_onnx.py)
BOARD_ONLY = "Not support in simulator environment"


def _small_onnx():
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _odd_arguments(rng: random.Random, params, required) -> dict:
    kwargs = {k: v for k, v in required.items()}
    for p in rng.sample(params, rng.randint(1, min(3, len(params)))):
        kwargs[p] = rng.choice(ODD)
    return kwargs


def _describe(kwargs) -> str:
    return ", ".join(f"{k}={type(v).__name__}" for k, v in kwargs.items())


@pytest.fixture()
def quiet(caplog):
    caplog.set_level(logging.CRITICAL, logger="rknnlite")


def _fuzz_lite2_contract(make, calls, required, stages, seed, board_only=None) -> list:
    """Fuzz an API with Lite2's contract (``RKNN``, ``RKNNLite``): ``calls`` maps a method to
    (its parameters, how many of ``stages`` it needs), ``required(name)`` gives the arguments a
    call keeps, each stage is ``obj -> 0`` and the last one leaves the object running (it must
    still ``inference`` afterwards). Returns what escaped as an exception (an exception
    holding ``board_only`` is the call's documented answer)."""
    rng = random.Random(seed)
    stray = []
    for _ in range(CALLS):
        name = rng.choice(sorted(calls))
        params, stage = calls[name]
        kwargs = _odd_arguments(rng, params, required(name))
        obj = make()
        try:
            for step in stages[:stage]:
                assert step(obj) == 0
            try:
                getattr(obj, name)(**kwargs)
            except Exception as e:  # noqa: BLE001 - what the fuzz looks for
                if board_only is None or board_only not in str(e):
                    stray.append(f"{name}({_describe(kwargs)}): {type(e).__name__}: {e}")
                continue
            if stage == len(stages) and obj.inference(**required("inference")) is None:
                stray.append(f"{name}({_describe(kwargs)}): the runtime is unusable afterwards")
        finally:
            obj.release()
    return stray


def test_toolkit_calls_return_their_failure_value(tmp_path, monkeypatch, quiet):
    monkeypatch.chdir(tmp_path)
    np.save("s.npy", np.zeros((1, 3, 8, 8), np.float32))
    (tmp_path / "dataset.txt").write_text("s.npy\n")
    model = _small_onnx()
    x = np.zeros((1, 8, 8, 3), np.float32)

    def required(name):
        return {k: (model if k == "model" else [x] if k == "inputs" else v)
                for k, v in TOOLKIT_REQUIRED.get(name, {}).items()}

    stages = [lambda r: r.config(target_platform="rk3588") or r.load_onnx(model),
              lambda r: r.build(do_quantization=False), lambda r: r.init_runtime()]
    assert _fuzz_lite2_contract(RKNN, TOOLKIT, required, stages, 2026, BOARD_ONLY) == []


def test_rknnlite_calls_return_their_failure_value(quiet):
    x = np.zeros((1, 32, 32, 3), np.uint8)

    def required(name):
        return {k: ([x] if k == "inputs" else v) for k, v in LITE_REQUIRED.get(name, {}).items()}

    stages = [lambda lite: lite.load_rknn(str(DEMO_MODEL_PATH)), lambda lite: lite.init_runtime()]
    assert _fuzz_lite2_contract(RKNNLite, LITE, required, stages, 2027) == []


def test_context_calls_raise_rknn_errors_only(quiet):
    x = np.zeros((1, 32, 32, 3), np.uint8)
    rng = random.Random(2028)
    stray = []
    for _ in range(CALLS):
        name = rng.choice(sorted(CONTEXT))
        required = {k: ([x] if k == "inputs" else v) for k, v in CONTEXT_REQUIRED.get(name, {}).items()}
        kwargs = _odd_arguments(rng, CONTEXT[name], required)
        ctx = None
        try:
            if name == "__init__":
                ctx = rknnlite.Context(str(DEMO_MODEL_PATH), **kwargs)
            else:
                ctx = rknnlite.Context(str(DEMO_MODEL_PATH), backend="software")
                getattr(ctx, name)(**kwargs)
        except rknnlite.RKNNError:
            pass
        except Exception as e:  # noqa: BLE001
            stray.append(f"{name}({_describe(kwargs)}): {type(e).__name__}: {e}")
        try:
            if ctx is not None:
                ctx.run([x])
        except Exception as e:  # noqa: BLE001
            stray.append(f"{name}({_describe(kwargs)}): unusable afterwards: {type(e).__name__}: {e}")
        finally:
            if ctx is not None:
                ctx.close()
    assert stray == []


def _pushed(pipeline):
    pipeline.push([1])
    return pipeline


def _pipeline_call(rng: random.Random, x, opened: list):
    """One fuzzed pipeline call: ``(description, run)``; ``run()`` makes the objects (appended to
    ``opened``, for closing) and calls them."""
    def made(obj):
        opened.append(obj)
        return obj

    kind = rng.choice(["Pipeline", "push", "pop", "close", "AsyncInferQueue", "wait_all"])
    if kind == "Pipeline":
        kwargs = _odd_arguments(rng, ["workers", "maxsize", "ordered", "drop", "on_error"], {})
        return f"Pipeline({_describe(kwargs)})", lambda: made(Pipeline(len, **kwargs)).push([1], timeout=5)
    if kind == "AsyncInferQueue":
        kwargs = _odd_arguments(rng, ["core_masks", "data_format", "pass_through", "want_float"], {})
        return (f"AsyncInferQueue({_describe(kwargs)})",
                lambda: made(AsyncInferQueue(str(DEMO_MODEL_PATH), 1, **kwargs)).infer([x]))
    arg = rng.choice(ODD)
    calls = {"wait_all": lambda: made(AsyncInferQueue(str(DEMO_MODEL_PATH), 1)).wait_all(timeout=arg),
             "push": lambda: made(Pipeline(len)).push([1], timeout=arg),
             "pop": lambda: _pushed(made(Pipeline(len))).pop(timeout=arg),  # a result waits: no long wait
             "close": lambda: made(Pipeline(len)).close(drain=arg, timeout=1)}
    return f"{kind}({type(arg).__name__})", calls[kind]


def test_pipeline_calls_raise_rknn_errors_only(quiet):
    x = np.zeros((1, 32, 32, 3), np.uint8)
    rng = random.Random(2029)
    stray = []
    for _ in range(CALLS // 4):
        opened: list = []
        what, run = _pipeline_call(rng, x, opened)
        try:
            run()
        except rknnlite.RKNNError:
            pass
        except Exception as e:  # noqa: BLE001
            stray.append(f"{what}: {type(e).__name__}: {e}")
        finally:
            for obj in opened:
                obj.close()
    assert stray == []


def _vision_calls():
    """vision call -> (the callable, the required arguments it keeps unless the fuzz replaces
    them, whether what it returns is a decoder to call on one output)."""
    image = np.zeros((20, 30, 3), np.uint8)
    calls = {
        "letterbox": (vision.letterbox, {"image": image, "size": 32}, False),
        "nms": (vision.nms, {"boxes": np.zeros((2, 4), np.float32), "scores": np.zeros(2, np.float32)}, False),
        "box_iou": (vision.box_iou, {"a": np.zeros((2, 4)), "b": np.zeros((2, 4))}, False),
        "top_k": (vision.top_k, {"output": np.zeros(10, np.float32)}, False),
        "segmentation_mask": (vision.segmentation_mask, {"output": np.zeros((1, 3, 4, 4), np.float32)}, False),
        "draw_detections": (vision.draw_detections, {"image": image, "dets": vision.Detections.empty()}, False),
        "retinaface_priors": (vision.retinaface_priors, {"input_size": 64}, False),
        "dfl_distances": (vision.dfl_distances, {"bins": np.zeros((4, 16, 5), np.float32)}, False),
        "Detections.empty": (vision.Detections.empty, {}, False),
        "DetectionStages": (vision.DetectionStages, {"decoder": vision.YOLOv8(), "size": 32}, False),
    }
    for cls in (vision.YOLOv5, vision.YOLOv7, vision.YOLOX, vision.YOLOv8, vision.YOLO11, vision.YOLOv8Seg,
                vision.YOLOv8Pose, vision.RetinaFace, vision.SCRFD):
        calls[cls.__name__] = (cls, {}, True)
    return calls


def test_vision_calls_raise_rknn_errors_only():
    calls = _vision_calls()
    rng = random.Random(2030)
    stray = []
    for _ in range(CALLS * 2):
        name = rng.choice(sorted(calls))
        fn, required, decoder = calls[name]
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        kwargs = _odd_arguments(rng, params, required)
        try:
            made = fn(**kwargs)
            if decoder:  # a decoder made from odd parameters decodes (or refuses) an odd output
                made(rng.choice(ODD))
        except rknnlite.RKNNError:
            pass
        except Exception as e:  # noqa: BLE001
            stray.append(f"{name}({_describe(kwargs)}): {type(e).__name__}: {e}")
    assert stray == []

"""Batch conversion from a yml file: what RKNN-Toolkit2's ``rknn_convert`` does.

``rknnlite convert -i model_config.yml -o OUT -t rk3588`` reads a file like::

    models:
      name: object_detection            # output file name: OUT/object_detection.rknn
      platform: onnx                    # source framework (only onnx here)
      model_file_path: ./object_detection.onnx   # relative to the yml file
      subgraphs:
        input_size_list: [1,3,512,512]  # one shape per input ("1,3,512,512" or a list)
        inputs: [data]
        outputs: [conv6-1, conv6-2]
      quantize: true
      dataset: ./dataset.txt            # relative to the yml file
      configs:                          # keyword arguments of RKNN.config()
        quantized_dtype: asymmetric_quantized-8
        mean_values: [127.5, 127.5, 127.5]
        std_values: [128.0, 128.0, 128.0]

``models`` may also be a list of such entries (one ``.rknn`` per entry).  Paths
inside the dataset file are taken relative to the dataset file's own directory (as
``RKNN.build`` reads them), so a yml, its dataset and its images can move together.  The target platform comes
from ``-t``.

:func:`read_config` validates the file (unknown keys and wrong types name the key
and the file); :func:`convert` runs config -> load_onnx -> build -> export_rknn
for each model and, when asked, measures accuracy against the float model (``-a``)
and time and memory on the software backend (``-e``).
"""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["ConvertError", "ModelJob", "ConvertResult", "read_config", "convert"]

_MODEL_KEYS = ("name", "platform", "model_file_path", "subgraphs", "quantize", "dataset", "configs")
_SUBGRAPH_KEYS = ("input_size_list", "inputs", "outputs")
_FRAMEWORKS = ("onnx",)


class ConvertError(ValueError):
    """A problem with a conversion config or one of its steps; the message names the file."""


@dataclass(frozen=True)
class ModelJob:
    """One ``models`` entry of a yml file, validated, with paths made absolute."""

    name: str
    model_file: str
    input_size_list: Optional[List[List[int]]]
    inputs: Optional[List[str]]
    outputs: Optional[List[str]]
    quantize: bool
    dataset: Optional[str]
    configs: Dict[str, Any]
    source: str


@dataclass
class ConvertResult:
    """What :func:`convert` did for one model.

    Attributes:
        name: the model's name from the yml.
        path: the exported ``.rknn`` file.
        cosine: with accuracy inputs: per input sample, the cosine similarity of each
            output against the float32 build of the same ONNX (``[sample][output]``).
        latency_ms: with evaluation: median latency of one inference on the software
            backend, in milliseconds.
        memory: with evaluation: ``{"model_bytes", "rss_growth_bytes", "internal_bytes"}``.
    """

    name: str
    path: str
    cosine: List[List[float]] = field(default_factory=list)
    latency_ms: Optional[float] = None
    memory: Dict[str, int] = field(default_factory=dict)


# -- reading the yml ----------------------------------------------------------------------------


def read_config(path) -> List[ModelJob]:
    """Parse and validate a conversion yml; one :class:`ModelJob` per ``models`` entry.

    Raises :class:`ConvertError` naming the file and the offending key for a missing
    file, a yml syntax error, an unknown key, a value of the wrong type, an
    unsupported framework, or a model/dataset file that does not exist.
    """
    try:
        import yaml
    except ImportError:
        raise ConvertError("reading a conversion yml needs PyYAML: pip install 'rknnlite-runtime[toolkit]'") from None
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except UnicodeDecodeError as e:  # a model file given as -i, say
        raise ConvertError(f"{path}: not a yml text file (byte {e.start} is not UTF-8)") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise ConvertError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    except yaml.YAMLError as e:
        raise ConvertError(f"{path}: not valid yml: {e}") from None
    if not isinstance(doc, dict) or "models" not in doc:
        raise ConvertError(f"{path}: expected a top-level 'models:' entry")
    unknown = sorted(set(doc) - {"models"})
    if unknown:
        raise ConvertError(f"{path}: unknown top-level key {unknown[0]!r}; expected only 'models'")
    entries = doc["models"]
    if isinstance(entries, dict):
        labelled = [("models", entries)]
    elif isinstance(entries, list) and entries:
        labelled = [(f"models[{i}]", entry) for i, entry in enumerate(entries)]
    else:
        raise ConvertError(f"{path}: 'models' must be a mapping (one model) or a non-empty list of them")
    base = os.path.dirname(os.path.abspath(path))
    jobs = [_read_model(entry, f"{path}: {label}", path, base) for label, entry in labelled]
    names = [j.name for j in jobs]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ConvertError(f"{path}: two models are named {duplicate!r}; each needs its own output name")
    return jobs


def _read_model(entry, where: str, path: str, base: str) -> ModelJob:
    if not isinstance(entry, dict):
        raise ConvertError(f"{where} must be a mapping of {', '.join(_MODEL_KEYS)}")
    _check_keys(entry, _MODEL_KEYS, where)
    name = _typed(entry, "name", str, where, required=True)
    if not name or os.sep in name or name in (".", ".."):
        raise ConvertError(f"{where}.name must be a plain file name, not {name!r}")
    platform = _typed(entry, "platform", str, where, required=True)
    if platform.lower() not in _FRAMEWORKS:
        raise ConvertError(f"{where}.platform {platform!r} is not supported; supported: {', '.join(_FRAMEWORKS)}")
    model_file = os.path.join(base, _typed(entry, "model_file_path", str, where, required=True))
    if not os.path.isfile(model_file):
        raise ConvertError(f"{where}.model_file_path: {model_file} does not exist")
    sub = _typed(entry, "subgraphs", dict, where) or {}
    _check_keys(sub, _SUBGRAPH_KEYS, f"{where}.subgraphs")
    sizes = _typed(sub, "input_size_list", list, f"{where}.subgraphs")
    input_size_list = [_shape(s, f"{where}.subgraphs.input_size_list[{i}]") for i, s in enumerate(sizes)] \
        if sizes is not None else None
    inputs = _names(sub, "inputs", f"{where}.subgraphs")
    outputs = _names(sub, "outputs", f"{where}.subgraphs")
    quantize = _typed(entry, "quantize", bool, where) or False
    dataset = _typed(entry, "dataset", str, where)
    if dataset is not None:
        dataset = os.path.join(base, dataset)
        if not os.path.isfile(dataset):
            raise ConvertError(f"{where}.dataset: {dataset} does not exist")
    if quantize and dataset is None:
        raise ConvertError(f"{where}: quantize is true but no dataset is given")
    configs = _typed(entry, "configs", dict, where) or {}
    known = _config_keys()
    for key in configs:
        if key == "target_platform":
            raise ConvertError(f"{where}.configs.target_platform: give the platform with -t instead")
        if key not in known:
            raise ConvertError(f"{where}.configs: unknown key {key!r}; RKNN.config() takes {', '.join(sorted(known))}")
    return ModelJob(name, model_file, input_size_list, inputs, outputs, quantize, dataset, dict(configs), path)


def _check_keys(mapping: dict, allowed: Sequence[str], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConvertError(f"{where}: unknown key {key!r}; expected one of {', '.join(allowed)}")


def _typed(mapping: dict, key: str, kind, where: str, required: bool = False):
    if key not in mapping or mapping[key] is None:
        if required:
            raise ConvertError(f"{where}: the key {key!r} is required")
        return None
    value = mapping[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConvertError(f"{where}.{key} must be a {kind.__name__}, not {type(value).__name__} ({value!r})")
    return value


def _shape(value, where: str) -> List[int]:
    """``"1,3,224,224"`` or ``[1, 3, 224, 224]`` -> ``[1, 3, 224, 224]``."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts]
    elif isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise ConvertError(f"{where} must be a shape like 1,3,224,224, not {value!r}")


def _names(mapping: dict, key: str, where: str) -> Optional[List[str]]:
    values = _typed(mapping, key, list, where)
    if values is not None and not all(isinstance(v, str) for v in values):
        raise ConvertError(f"{where}.{key} must be a list of tensor names, not {values!r}")
    return values


def _config_keys() -> set:
    """Every keyword ``RKNN.config()`` knows: its parameters and the vendor options it handles."""
    from . import rknn

    params = inspect.signature(rknn.RKNN.config).parameters.values()
    named = {p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self"}
    tables = ("_QUANT_DEFAULTS", "_COMPILER_SETTINGS", "_IGNORED_AT_DEFAULT")
    return named.union(*(set(getattr(rknn, t, ())) for t in tables))


# -- converting ---------------------------------------------------------------------------------


def convert(config_path, output_dir, target_platform: str, *, accuracy_inputs: Sequence[str] = (),
            evaluate: bool = False, verbose: bool = False, eval_runs: int = 10) -> List[ConvertResult]:
    """Convert every model of a yml file into ``output_dir/<name>.rknn``.

    Args:
        config_path: the yml file (see the module docstring).
        output_dir: created if missing.
        target_platform: e.g. ``"rk3588"`` (any platform ``RKNN.config`` accepts).
        accuracy_inputs: input files (images or ``.npy``, one per sample, single-input
            models) to compare the converted model against the float32 build of the same
            ONNX on the software backend (the cosine of each output).
        evaluate: also measure latency (median of ``eval_runs``) and memory on the software
            backend.
        verbose: the toolkit's messages on stderr (``RKNN(verbose=True)``).

    Raises :class:`ConvertError` for a bad config or a failed step (the step's reason is
    in the ``rknnlite.toolkit`` log).
    """
    jobs = read_config(config_path)
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
        raise ConvertError(f"cannot create the output directory {output_dir}: {e.strerror or e}") from None
    results = []
    for job in jobs:
        path = os.path.join(os.fspath(output_dir), f"{job.name}.rknn")
        _build(job, target_platform, path, verbose, quantize=job.quantize)
        result = ConvertResult(job.name, path)
        if accuracy_inputs:
            result.cosine = _accuracy(job, target_platform, path, accuracy_inputs, verbose)
        if evaluate:
            result.latency_ms, result.memory = _evaluate(path, eval_runs)
        results.append(result)
    return results


def _build(job: ModelJob, target: str, path: Optional[str], verbose: bool, quantize: bool,
           float_dtype: Optional[str] = None):
    """config -> load_onnx -> build (-> export_rknn when ``path``); returns the RKNN object
    when ``path`` is None (the caller runs and releases it)."""
    from .rknn import RKNN

    rknn = RKNN(verbose=verbose)
    configs = dict(job.configs)
    if float_dtype is not None:
        configs["float_dtype"] = float_dtype
    try:
        dataset = job.dataset if quantize else None
        steps = (
            ("config", lambda: rknn.config(target_platform=target, **configs)),
            ("load_onnx", lambda: rknn.load_onnx(job.model_file, inputs=job.inputs,
                                                 input_size_list=job.input_size_list, outputs=job.outputs)),
            # not build(): a verbose RKNN's build writes the check*.onnx debug files into the cwd,
            # which a conversion of several models (and its float reference) would overwrite
            ("build", lambda: rknn._build(quantize, dataset, None, False, check_models=False)),
        )
        if path is not None:
            steps += (("export_rknn", lambda: rknn.export_rknn(path)),)
        for step, call in steps:
            if call() != 0:
                raise ConvertError(f"{job.source}: model {job.name!r}: {step} failed (the reason is logged above)")
    except BaseException:
        rknn.release()
        raise
    if path is not None:
        rknn.release()
        return None
    return rknn


def _accuracy(job: ModelJob, target: str, path: str, files: Sequence[str], verbose: bool) -> List[List[float]]:
    """Per sample, the cosine of each output of the exported model against a float32 build."""
    from ..runtime.context import Context

    reference = _build(job, target, None, verbose, quantize=False, float_dtype="float32")
    try:
        if reference.init_runtime() != 0:
            raise ConvertError(f"{job.source}: model {job.name!r}: init_runtime of the float reference failed")
        with Context(path, backend="software") as ctx:
            if len(ctx.inputs) != 1:
                raise ConvertError(f"{job.source}: model {job.name!r}: -a compares single-input models; "
                                   f"this one has {len(ctx.inputs)} inputs")
            cosines = []
            for file in files:
                x = _load_input(file, ctx.inputs[0])
                expected = reference.inference([x], data_format="nchw")
                if expected is None:
                    raise ConvertError(f"model {job.name!r}: the float reference failed on {file}")
                actual = ctx.run([x], data_format="nchw")
                cosines.append([_cosine(a, e) for a, e in zip(actual, expected)])
            return cosines
    finally:
        reference.release()


def _load_input(file: str, attr) -> np.ndarray:
    """An accuracy sample for an input: an image (HWC RGB -> NCHW) or a ``.npy`` array."""
    from .dataset import load_sample

    return load_sample(file, attr)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    if denom == 0:
        return 1.0 if not a.any() and not b.any() else 0.0
    return float(a @ b / denom)


def _evaluate(path: str, runs: int) -> Tuple[float, Dict[str, int]]:
    """Median latency (ms) and memory of the exported model on the software backend."""
    import psutil

    from ..runtime.context import Context

    proc = psutil.Process()
    before = proc.memory_info().rss
    with Context(path, backend="software") as ctx:
        feeds = [np.zeros([max(d, 1) for d in a.dims], a.dtype) for a in ctx.inputs]
        ctx.run(feeds)  # plans the memory; not timed
        times = []
        for _ in range(max(1, runs)):
            t0 = time.perf_counter()
            ctx.run(feeds)
            times.append(time.perf_counter() - t0)
        memory = {"model_bytes": os.path.getsize(path), "rss_growth_bytes": max(0, proc.memory_info().rss - before)}
        mem_size = getattr(ctx, "mem_size", None)
        if mem_size is not None:
            info = mem_size()
            internal = info.get("total_internal_size") if isinstance(info, dict) else \
                getattr(info, "total_internal_size", None)
            if internal is not None:
                memory["internal_bytes"] = int(internal)
    return float(np.median(times) * 1e3), memory

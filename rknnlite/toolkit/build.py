"""``RKNN.build`` as a pipeline of named steps.

:class:`~rknnlite.toolkit.RKNN` checks its arguments, makes a :class:`BuildJob` with
:func:`prepare` (the configuration's mean/std, the calibration samples, the batch) and runs
:func:`run_build`; it only translates what they raise into the toolkit's ``-1`` and log
lines.  The steps, in :data:`STEPS` order, each a function of the job:

1. ``optimize``: :func:`rknnlite.toolkit.optimize.optimize` on the imported graph (a copy);
   the job's ``stages`` callback hears its stages (``RKNN(verbose=True)`` writes them as
   ``check*.onnx``, :mod:`rknnlite.toolkit.check_models`).
2. ``prune``: ``config(model_pruning=True)``'s channel pruning (logs the vendor's lines).
3. ``custom_ops``: registered custom ops checked against their ``shape_infer``.
4. ``shape_sets``: a ``dynamic_input`` model run once on every shape set; the outputs get
   ``-1`` on the dims that vary.
5. ``quantize``: calibration ranges (or hybrid step2's), hybrid float16 layers, the int8
   parameters and the warnings about what quantization destroys; a pre-quantized import
   keeps its own parameters.  The I/O specs take their tensors' parameters.
6. ``float16``: constants rounded to float16 (``float_dtype="float16"``).
7. ``sparsity``: ``config(sparse_infer=True)``'s Conv weights marked for the sparse kernel.
8. ``batch``: ``rknn_batch_size``'s axis 0 multiplied on the I/O specs.
9. ``write``: the metadata and the portable container (and, with ``remove_weight=True``,
   the weight-less model beside the full one).
10. ``load_check``: the written model loads on the software backend, as ``init_runtime`` and
    every runtime load it: a node its kernel refuses (an Unsqueeze naming one axis twice) fails
    the build, not the file's first load.  Loading prepares each node once; weights are packed
    only when a context first runs, so this costs little.

A step that does not apply to a job does nothing (and is still named in the order).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError
from ..model.graph import Graph
from ..model.spec import TensorSpec

__all__ = ["BuildJob", "STEPS", "STEP_NAMES", "prepare", "preprocess_pairs", "run_build", "float_outputs_per_sample",
           "proposed_floats"]

#: Per input ``(mean, std)`` channel lists, or ``[]`` when no input is normalised.
Preprocess = List[Tuple[List[float], List[float]]]
#: Hybrid step2's ``(custom_quantize_layers, quantize_parameters ranges)``.
Hybrid = Tuple[Dict[str, str], Dict[str, Tuple[float, float]]]


@dataclass
class BuildJob:
    """One build: what ``RKNN`` hands the pipeline, and what the steps make of it.

    Attributes:
        imported: the :class:`~rknnlite.toolkit.onnx_import.ImportedModel` (never changed).
        cfg: the ``RKNN.config`` options.
        preprocess: :func:`preprocess_pairs` of the configuration.
        quantize: ``do_quantization``.
        samples: the calibration samples (NCHW float32 lists, raw values before mean/std),
            ``None`` when nothing is calibrated (a float build, hybrid step2).
        hybrid: hybrid step2's layers and ranges, or ``None``.
        batch: ``rknn_batch_size`` (1: no batching).
        auto_hybrid: ``build(auto_hybrid=True)``.
        custom_ops: the registered custom operators by op type.
        log: the ``RKNN`` object's logger (an ``InstanceLog``).
        verbose: progress bars during calibration.
        stages: the ``stages`` callback of :func:`~rknnlite.toolkit.optimize.optimize`, or ``None``.
        graph, input_specs, output_specs: the graph and I/O specs as the steps leave them.
        steps_run: the names of the steps run so far, in order.
        data: the built model's bytes (the ``write`` step); ``full``: the model with its
            weights when ``data`` is weight-less, else ``None``.
    """

    imported: Any
    cfg: Dict[str, Any]
    preprocess: Preprocess
    quantize: bool
    samples: Optional[List[List[np.ndarray]]]
    hybrid: Optional[Hybrid]
    batch: int
    auto_hybrid: bool
    custom_ops: Dict[str, Any]
    log: Any
    verbose: bool = False
    stages: Optional[Callable[[str, Graph], None]] = None
    graph: Optional[Graph] = None
    input_specs: List[TensorSpec] = field(default_factory=list)
    output_specs: List[TensorSpec] = field(default_factory=list)
    steps_run: List[str] = field(default_factory=list)
    data: Optional[bytes] = None
    full: Optional[bytes] = None

    @property
    def custom(self) -> List[Any]:
        """The registered custom operators, as the executor takes them."""
        return list(self.custom_ops.values())


# -- preparing -----------------------------------------------------------------------------------


def preprocess_pairs(cfg: Dict[str, Any], specs: Sequence[TensorSpec],
                     raw_inputs: Sequence[Optional[Tuple[str, float, int]]] = ()) -> Preprocess:
    """Per input the ``(mean, std)`` channel lists of ``config(mean_values=, std_values=)``
    (one value is repeated over the channels; inputs without normalisation get the
    identity), or ``[]`` when none is set.  Only 4-D float inputs are normalised, and not
    those ``raw_inputs`` marks (``ImportedModel.raw_inputs``: they take a quantized file's
    codes, which RKNN-Toolkit2 feeds as they are whatever the configuration says).

    Raises:
        ValueError: a list of the wrong length, or mean/std on an input that cannot take it.
    """
    mean, std = cfg["mean_values"], cfg["std_values"]
    if mean is None and std is None:
        return []
    n = len(specs)
    for what, values in (("mean_values", mean), ("std_values", std)):
        if values is not None and len(values) != n:
            raise ValueError(f"{what} has {len(values)} entries for {n} model inputs")
    out: List[Optional[Tuple[List[float], List[float]]]] = []
    for i, spec in enumerate(specs):
        m = list(mean[i]) if mean is not None else None
        s = list(std[i]) if std is not None else None
        if i < len(raw_inputs) and raw_inputs[i] is not None:
            out.append(None)
            continue
        if spec.dtype != "float32" or len(spec.shape) != 4:
            if (m and any(v != 0 for v in m)) or (s and any(v != 1 for v in s)):
                raise ValueError(f"mean/std for input {i} ({spec.name!r}): only 4-D float inputs are normalised")
            out.append(None)
            continue
        channels = spec.shape[1]
        width = len(m or s)
        if channels < 0:
            channels = width
        m = m or [0.0] * width
        s = s or [1.0] * width
        if len(m) == 1:
            m = m * channels
        if len(s) == 1:
            s = s * channels
        if len(m) != channels or len(s) != channels:
            raise ValueError(f"mean_values/std_values for input {i} ({spec.name!r}) have {len(m)}/{len(s)} "
                             f"values; the input has {channels} channels")
        out.append((m, s))
    if all(p is None for p in out):
        return []
    return [p if p is not None else ([0.0], [1.0]) for p in out]


def _warn_unused_normalisation(cfg: Dict[str, Any], imported, log) -> None:
    """Say when ``mean_values``/``std_values`` are set for an input that takes a quantized
    file's codes (they do not apply there), unless they are the file's own grid
    (``mean = zero point``, ``std = 1 / scale``: the normalisation the codes already carry,
    as Rockchip's ``tflite/mobilenet_v1_qat`` example sets them)."""
    for i, raw in enumerate(imported.raw_inputs):
        if raw is None:
            continue
        dtype, scale, zp = raw
        mean = cfg["mean_values"][i] if cfg["mean_values"] else None
        std = cfg["std_values"][i] if cfg["std_values"] else None
        if all(v is None or np.allclose(np.asarray(v, np.float64), want, rtol=1e-2)
               for v, want in ((mean, zp), (std, 1.0 / scale))):
            continue
        log.warning("build: mean_values/std_values of input %r (%s, %s) are not applied: it takes the "
                    "file's %s codes as they are (zero point %d, scale %.6g), as RKNN-Toolkit2 does; "
                    "load_tflite(..., input_is_quant=False) makes it take real values instead",
                    imported.input_specs[i].name, mean, std, dtype, zp, scale)


def prepare(imported, cfg: Dict[str, Any], *, quantize: bool, dataset: Optional[str], hybrid: Optional[Hybrid],
            batch: int, auto_hybrid: bool, custom_ops: Dict[str, Any], log, verbose: bool,
            quant_problem: Callable[[], Optional[str]],
            stages: Optional[Callable[[str, Graph], None]] = None) -> BuildJob:
    """Check what the build needs before it starts and make its :class:`BuildJob`: the
    configuration's mean/std, the calibration samples (``dataset`` read, fitted to the
    ``dynamic_input`` sets no sample matches), the batch against the I/O specs.
    ``quant_problem()`` names what is wrong with the quantization options (or ``None``);
    asked only when samples are to be read.  ``stages``: see :attr:`BuildJob.stages`.

    Raises:
        InvalidParamError: its message is the toolkit's log line after ``"build: "``.
    """
    from . import quantize as quant
    from . import shapes as shape_sets

    try:
        preprocess = preprocess_pairs(cfg, imported.input_specs, imported.raw_inputs)
    except ValueError as e:
        raise InvalidParamError(str(e), op="build") from None
    _warn_unused_normalisation(cfg, imported, log)
    samples = None
    if quantize and hybrid is None:
        problem = quant_problem()
        if problem:
            raise InvalidParamError(f"do_quantization=True: {problem}", op="build")
        if imported.graph.quant:
            # as RKNN-Toolkit2 2.5.0 (-1 with this sentence; QDQ ONNX, TensorFlow FakeQuant and
            # quantized TFLite alike): calibrating would silently replace the model's own grids
            raise InvalidParamError(
                "If a quantized model has been import, please set do_quantization = False: the model "
                f"carries its own quantization ({len(imported.graph.quant)} tensors: QDQ pairs, FakeQuant "
                "nodes or a quantized file), which build(do_quantization=False) uses; calibrating on a "
                "dataset would replace it", op="build")
        sets = imported.dynamic_shapes
        try:
            samples = quant.read_dataset(dataset, imported.input_specs, rgb2bgr=cfg["quant_img_RGB2BGR"])
            if sets:
                samples, added = shape_sets.cover_shape_sets(samples, sets)
                if added:
                    log.info("build: dynamic_input sets %s have no calibration sample; calibrating "
                             "them on the samples fitted to their shapes", added)
        except (quant.DatasetError, ValueError) as e:
            raise InvalidParamError(f"do_quantization=True: {e}", op="build") from None
    if batch > 1:
        batched = shape_sets.batch_specs(imported.input_specs, batch, "input", require_unit_batch=True)
        shape_sets.batch_specs(imported.output_specs, batch, "output", require_unit_batch=False)
        log.debug("build: rknn_batch_size=%d, inputs %s", batch, [list(t.shape) for t in batched])
    return BuildJob(imported, cfg, preprocess, quantize, samples, hybrid, batch, auto_hybrid, custom_ops, log,
                    verbose, stages)


# -- the steps -------------------------------------------------------------------------------------


def _optimize(job: BuildJob) -> None:
    from .optimize import optimize, splits_pools

    quantized = job.quantize or job.hybrid is not None or bool(job.imported.graph.quant)
    rounds = splits_pools(job.cfg["float_dtype"], quantized)
    job.graph = optimize(job.imported.graph, job.imported.shapes, split_pools=rounds, vendor_affines=rounds,
                         stages=job.stages)
    job.input_specs, job.output_specs = list(job.imported.input_specs), list(job.imported.output_specs)


def _prune(job: BuildJob) -> None:
    if not job.cfg.get("model_pruning"):
        return
    from .prune import format_result, prune_channels

    result = prune_channels(job.graph, job.imported.shapes)
    if result.pruned:
        for line in format_result(result):
            job.log.info("%s", line)
        job.log.debug("model_pruning: channels removed per node: %s", result.channels)
    else:
        job.log.info("model_pruning: nothing can be pruned (no channel is all zeros or unread); "
                     "the model is unchanged")


def _check_custom_ops(job: BuildJob) -> None:
    if not job.custom_ops:
        return
    from .custom_op import check_custom_outputs

    checked = check_custom_outputs(job.graph, job.custom_ops, job.imported.input_specs, job.imported.shapes)
    if checked:
        job.log.debug("build: %d custom op node(s) checked against their shape_infer", checked)


def _shape_sets(job: BuildJob) -> None:
    sets = job.imported.dynamic_shapes
    if not sets:
        return
    from . import shapes as shape_sets
    from .onnx_import import tensor_layout

    per_set = shape_sets.verify_shape_sets(job.graph, sets, job.input_specs, custom_ops=job.custom)
    merged = shape_sets.merge_output_shapes(per_set, [t.name for t in job.output_specs])
    job.output_specs = [replace(t, shape=m, layout=tensor_layout(t.dtype, m)) for t, m in zip(job.output_specs, merged)]
    job.log.info("build: the graph runs all %d dynamic_input sets; outputs %s", len(sets), [list(m) for m in merged])


def _quantize(job: BuildJob) -> None:
    from . import quantize

    graph, samples, cfg = job.graph, job.samples, job.cfg
    if samples is not None or (job.quantize and job.hybrid is not None):
        method = cfg.get("quantized_method", "channel")
        if job.hybrid is not None:
            known = set(graph.produced()) | set(graph.inputs) | set(graph.constants)  # mmse: weights too
            ranges = {k: v for k, v in job.hybrid[1].items() if k in known}
        else:
            # Progress bars (tqdm, stderr) only for a verbose object (and on a terminal).
            ranges = quantize.calibrate(graph, samples, job.preprocess or None, cfg.get("quantized_algorithm", "normal"),
                                        job.verbose, custom_ops=job.custom, method=method)
        # the float outputs over the samples serve auto hybrid and the warnings alike
        outputs = float_outputs_per_sample(graph, samples, job.preprocess, job.custom) if samples is not None else None
        floats = _hybrid_floats(job, ranges, outputs)
        graph.quant = quantize.quantize_graph(graph, ranges, method, floats)
        quantize.snap_weights(graph)
        job.log.info("build: %s; %d tensors quantized, %d kept in float16",
                     f"calibrated on {len(samples)} samples ({cfg.get('quantized_algorithm', 'normal')})"
                     if samples is not None else "ranges of the hybrid quantization cfg",
                     len(graph.quant), len(floats))
        if samples is not None:
            _warn_quantization(job, samples[0], outputs)
    elif graph.quant:  # a pre-quantized import (load_tflite): the file's own parameters
        graph.quant = quantize.implied_grids(graph, quantize.live_quant(graph))
        job.log.info("build: the model is quantized already; %d tensors keep its int8 parameters", len(graph.quant))
    if graph.quant:
        job.input_specs = [replace(t, quant=graph.quant.get(t.name)) for t in job.input_specs]
        job.output_specs = [replace(t, quant=graph.quant.get(t.name)) for t in job.output_specs]


def _float16(job: BuildJob) -> None:
    if job.cfg["float_dtype"] != "float16":
        return
    from ..backends.software.float16_rules import attention_intermediates
    from .optimize import round_constants_to_float16
    from .quantize import codes_lost_in_float16

    # what the float16 executor keeps float32 among the constants, and int8 weights whose
    # codes float16 would change
    keep = job.graph.float32_constants() | attention_intermediates(job.graph) | codes_lost_in_float16(job.graph)
    round_constants_to_float16(job.graph, keep=keep)


def _sparsity(job: BuildJob) -> None:
    if not job.cfg.get("sparse_infer"):
        return
    from .sparsity import mark_for_build

    mark_for_build(job.graph, job.cfg["target_platform"], job.log)


def _batch(job: BuildJob) -> None:
    if job.batch <= 1:
        return
    from . import shapes as shape_sets

    job.input_specs = shape_sets.batch_specs(job.input_specs, job.batch, "input", require_unit_batch=True)
    job.output_specs = shape_sets.batch_specs(job.output_specs, job.batch, "output", require_unit_batch=False)


def _write(job: BuildJob) -> None:
    from ..model.metadata import Preprocess as ModelPreprocess
    from ..model.metadata import build_metadata
    from ..model.portable import weight_names, write_portable
    from . import shapes as shape_sets

    cfg = job.cfg
    metadata = build_metadata(
        job.input_specs, job.output_specs,
        target_platforms=(cfg["target_platform"],),
        custom_string=cfg["custom_string"],
        float_dtype=cfg["float_dtype"],
        quantization="int8" if job.samples is not None or job.graph.quant else None,
        preprocess=tuple(ModelPreprocess(tuple(m), tuple(s)) for m, s in job.preprocess) if job.preprocess else (),
        dynamic_shapes=shape_sets.stored_order(job.imported.dynamic_shapes),
        batch_size=job.batch,
    )
    job.data = write_portable(metadata, job.graph)
    if cfg.get("remove_weight"):
        job.full, removed = job.data, weight_names(job.graph)
        job.data = write_portable(metadata, job.graph, shared=removed)
        job.log.info("build: remove_weight=True: %d weight tensors left out of the model (%d -> %d bytes); "
                     "it runs beside a context of the full model (share_weights_with)",
                     len(removed), len(job.full), len(job.data))


def _load_check(job: BuildJob) -> None:
    from ..runtime.context import Context

    with Context(job.full or job.data, backend="software", custom_ops=list(job.custom_ops.values())):
        pass


#: The build steps in the order they run (see the module docstring).
STEPS: Tuple[Tuple[str, Callable[[BuildJob], None]], ...] = (
    ("optimize", _optimize),
    ("prune", _prune),
    ("custom_ops", _check_custom_ops),
    ("shape_sets", _shape_sets),
    ("quantize", _quantize),
    ("float16", _float16),
    ("sparsity", _sparsity),
    ("batch", _batch),
    ("write", _write),
    ("load_check", _load_check),
)
STEP_NAMES: Tuple[str, ...] = tuple(name for name, _ in STEPS)


def run_build(job: BuildJob) -> BuildJob:
    """Run every step of :data:`STEPS` on ``job`` in order (each logged at debug level);
    returns ``job`` with ``data`` (and ``full``) set.  Raises what a step raises
    (``RKNNError`` for a model the build refuses)."""
    for name, step in STEPS:
        job.log.debug("build step: %s", name)
        step(job)
        job.steps_run.append(name)
    return job


# -- quantization helpers (also used by hybrid_quantization_step1) ---------------------------------


def float_outputs_per_sample(graph: Graph, samples, preprocess: Preprocess, custom: Sequence = ()
                             ) -> Dict[str, List[np.ndarray]]:
    """``{output: [float32 value per calibration sample]}`` of ``graph``."""
    from . import quantize
    from .accuracy import float_outputs

    outs: Dict[str, List[np.ndarray]] = {name: [] for name in graph.outputs}
    for sample in samples:
        feeds = quantize.graph_feeds(sample, preprocess or None)
        for name, value in float_outputs(graph, feeds, custom).items():
            outs[name].append(value)
    return outs


def proposed_floats(graph: Graph, quant, error_samples, outputs, preprocess: Preprocess, cos: float,
                    euc: Optional[float], custom: Sequence = ()) -> Dict[str, float]:
    """``{tensor: score}`` that quantization destroys: layers whose int8 output (each alone,
    on ``error_samples``) falls below ``cos`` / above ``euc`` (score: the worst cosine), and
    outputs most of whose channels collapse (``outputs``: their float values per calibration
    sample, :func:`float_outputs_per_sample`) with the tensors they are reshaped from (score:
    the share of channels that survive)."""
    from . import hybrid, quantize

    worst: Dict[str, Any] = {}
    for sample in error_samples:
        for e in hybrid.layer_errors(graph, quant, quantize.graph_feeds(sample, preprocess or None), custom):
            if e.name not in worst or e.cos < worst[e.name].cos:
                worst[e.name] = e
    out = {name: worst[name].cos for name in hybrid.auto_float_tensors(worst.values(), cos, euc)}
    for name, (flat, channels, _, _) in hybrid.collapsed_channels(quant, outputs).items():
        for tensor in hybrid.with_layout_producers(graph, [name]):
            out.setdefault(tensor, 1.0 - flat / channels)
    return out


def _hybrid_floats(job: BuildJob, ranges, outputs) -> List[str]:
    """The tensors hybrid quantization keeps in float16: those step2's cfg lists as
    float16, and with ``auto_hybrid`` / ``quantized_hybrid_level`` the layers whose int8
    error is above the threshold (on the first calibration sample) and the outputs whose
    channels mostly quantize to one value (``outputs``: :func:`float_outputs_per_sample`)."""
    from . import hybrid, quantize

    graph, cfg, samples = job.graph, job.cfg, job.samples
    listed = [k for k, dtype in (job.hybrid[0] if job.hybrid else {}).items() if dtype == "float16"]
    # a listed tensor a Reshape/Transpose... makes from another keeps that one float16 too
    floats = hybrid.with_layout_producers(graph, listed)
    for name in floats:
        if name not in listed:
            job.log.info("build: %s only moves the values of a float16 tensor: kept in float16 too", name)
    level = int(cfg.get("quantized_hybrid_level", 0))
    if (job.auto_hybrid or level) and samples:
        cos = float(cfg.get("auto_hybrid_cos_thresh", hybrid.DEFAULT_COS_THRESH))
        if level:
            cos = max(cos, hybrid.LEVEL_COS_THRESH[min(level, 3)])
        quant = quantize.quantize_graph(graph, ranges, cfg.get("quantized_method", "channel"), floats)
        auto = proposed_floats(graph, quant, samples[:1], outputs, job.preprocess, cos,
                               cfg.get("auto_hybrid_euc_thresh"), job.custom)
        floats += [name for name in auto if name not in floats]
    for name in floats:
        job.log.info("Meet hybrid type, dtype: float16, tensor: %s", name)
    return floats


def _warn_quantization(job: BuildJob, sample, outputs) -> None:
    """Warn (naming the tensor, the loss and the fix) where quantizing destroys information
    (layer errors on one calibration ``sample``, collapsed channels in ``outputs``): see
    :func:`rknnlite.toolkit.hybrid.diagnose`."""
    from . import hybrid, quantize

    graph = job.graph
    errors = hybrid.layer_errors(graph, graph.quant, quantize.graph_feeds(sample, job.preprocess or None), job.custom)
    for message in hybrid.diagnose(graph, graph.quant, outputs, errors):
        job.log.warning("build: %s", message)

"""Detection as pipeline stages: letterbox before the model, decode and map back after."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..errors import InvalidParamError
from ..runtime.args import is_number
from ..pipeline import Carry
from .checks import flag, picture_size
from .letterbox import GREY, letterbox
from .result import Detections

__all__ = ["DetectionStages", "image_input"]


def image_input(ctx) -> Tuple[Tuple[int, int], str]:
    """``((height, width), layout)`` of ``ctx``'s first input, a 4-D image input:
    ``layout`` is ``"nchw"`` or ``"nhwc"`` as ``ctx.inputs[0].fmt`` states.

    Raises:
        InvalidParamError: the first input is not 4-D.
    """
    attr = ctx.inputs[0]
    dims = tuple(attr.dims)
    if len(dims) != 4:
        raise InvalidParamError(f"input {attr.name!r} has shape {list(dims)}; a 4-D image input is needed",
                                op="image_input")
    if attr.fmt.name == "NCHW":
        return (dims[2], dims[3]), "nchw"
    return (dims[1], dims[2]), "nhwc"


class DetectionStages:
    """The preprocess and postprocess stages of a detector, for
    ``Pipeline(stages.preprocess, model, stages.postprocess)``.

    ``preprocess(frame)`` letterboxes an (H, W, C) frame into ``size`` and returns a
    :class:`~rknnlite.pipeline.Carry` of the model input list and the transform; the
    inference stage runs the input and keeps the transform; ``postprocess(carry)`` decodes
    the outputs with ``decoder`` (``quant``: ``ctx.outputs`` for raw ``want_float=False``
    outputs) and returns :class:`Detections` on the source frame, with the pipeline's
    ``frame_id``.

    Args:
        decoder: a decoder (e.g. :class:`~rknnlite.vision.YOLOv8`), any
            ``decoder(outputs, quant) -> Detections``.
        size: model input (height, width) or an int.
        quant: per-output quantization for raw outputs (``ctx.outputs``), else ``None``.
        swap_rb: reverse the frame's channels (BGR camera frames into an RGB model).
        pad: letterbox fill value.
        layout: ``"nhwc"`` (1, H, W, C) or ``"nchw"`` (1, C, H, W): the layout the model's
            input attribute states (``ctx.inputs[0].fmt``).

    Raises:
        InvalidParamError: an unknown ``layout``, a bad ``size``, a ``decoder`` that is not
            callable, a ``swap_rb`` that is not True/False, a ``pad`` that is not a number.
    """

    def __init__(self, decoder, size, quant=None, swap_rb: bool = False, pad: int = GREY, layout: str = "nhwc"):
        if not isinstance(layout, str) or layout not in ("nhwc", "nchw"):
            raise InvalidParamError(f"layout must be 'nhwc' or 'nchw', not {layout!r}",
                                    op="DetectionStages")
        if not callable(decoder):
            raise InvalidParamError(f"decoder must be a decoder (callable), not {decoder!r}",
                                    op="DetectionStages")
        if not is_number(pad):
            raise InvalidParamError(f"pad must be a number, not {pad!r}", op="DetectionStages")
        self.decoder = decoder
        self.size = picture_size(size, "size", "DetectionStages")
        self.quant = quant
        self.swap_rb = flag(swap_rb, "swap_rb", "DetectionStages")
        self.pad = pad
        self.layout = layout

    @classmethod
    def from_context(cls, decoder, ctx, raw: bool = False, **kwargs) -> "DetectionStages":
        """Stages for ``ctx``'s first input (its size and layout from ``ctx.inputs[0]``);
        ``raw=True`` when the inference stage runs with ``want_float=False`` (the outputs'
        quantization comes from ``ctx.outputs``)."""
        size, layout = image_input(ctx)
        return cls(decoder, size, quant=ctx.outputs if raw else None, layout=layout, **kwargs)

    def preprocess(self, frame: np.ndarray) -> Carry:
        """Letterbox ``frame``: ``Carry([input], transform)``, ``input`` a new (1, H, W, C)
        or (1, C, H, W) array."""
        picture, transform = letterbox(frame, self.size, pad=self.pad, swap_rb=self.swap_rb)
        if self.layout == "nchw":
            picture = np.ascontiguousarray(picture.transpose(2, 0, 1))
        return Carry([picture[None]], transform)

    def postprocess(self, item: Carry) -> Detections:
        """Decode the outputs an inference stage put in ``item`` and map them to the frame."""
        dets = self.decoder(item.data, self.quant)
        transform = item.meta
        if transform is not None:
            dets = dets.to_source(transform)
        return dets.replace(frame_id=item.frame_id)

    def __call__(self, ctx_or_queue, frame: np.ndarray, want_float: Optional[bool] = None) -> Detections:
        """Run one frame synchronously on a Context (or anything with ``run``/``infer``)."""
        item = self.preprocess(frame)
        run = getattr(ctx_or_queue, "infer", None) or ctx_or_queue.run
        return self.postprocess(item._replace(data=run(item.data)))

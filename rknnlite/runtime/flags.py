"""Which ``rknn_init`` flags a :class:`~rknnlite.runtime.context.Context` takes.

Every :class:`~rknnlite.constants.InitFlag` is either implemented on both backends or refused
when the context is created (:class:`~rknnlite.errors.InvalidParamError` naming it); none is
passed to librknnrt unchecked.

Accepted (npu backend / software backend):

* ``PRIOR_HIGH``/``PRIOR_MEDIUM``/``PRIOR_LOW``: passed to librknnrt (the priority of the
  context's jobs in the NPU queue) / accepted: each context runs on its caller's thread,
  there is no shared queue to order.
* ``COLLECT_PERF_MASK``: librknnrt's profile / per-operator timing.
* ``ASYNC_MASK``: ``run`` returns the previous frame (librknnrt) / the same, emulated.
* ``MEM_ALLOC_OUTSIDE``: the caller gives weight and internal memory (``set_weight_mem``,
  ``set_internal_mem``) / the same: the weights and planned activations live in that memory.
* ``INTERNAL_ALLOC_OUTSIDE``: the caller gives the internal memory only / the same.
* ``SHARE_WEIGHT_MEM``: set by ``share_weights_with=`` only (it needs ``rknn_init_extend.ctx``).
* ``DISABLE_PROC_HIGH_PRIORITY``: passed (librknnrt does not raise the process priority) /
  accepted: rknnlite never changes the process priority.
* ``DISABLE_FLUSH_INPUT_MEM_CACHE``/``DISABLE_FLUSH_OUTPUT_MEM_CACHE``: passed / emulated cache
  maintenance (:mod:`.memory`).

Refused: ``FENCE_IN_OUTSIDE``/``FENCE_OUT_OUTSIDE`` (no fence API is bound),
``COLLECT_MODEL_INFO_ONLY`` (create a ``MEM_ALLOC_OUTSIDE`` context and call ``mem_size()``),
``EXECUTE_FALLBACK_PRIOR_DEVICE_GPU`` (no GPU fallback), ``ENABLE_SRAM``/``SHARE_SRAM``
(on-chip SRAM is not managed), ``MODEL_BUFFER_ZERO_COPY`` (models are handed over as buffers
or mapped files), ``MEM_FLAG_ALLOC_NO_CONTEXT`` (a ``create_mem2`` flag, not an init flag)
and unknown bits.  ``ASYNC_MASK`` is refused for dynamic-shape models (the previous frame
can have other shapes than the current one).
"""

from __future__ import annotations

from ..constants import InitFlag
from ..errors import InvalidParamError

__all__ = ["ACCEPTED", "REFUSED", "check_init_flags", "ALLOC_OUTSIDE"]

#: flags implemented on both backends
ACCEPTED = (InitFlag.PRIOR_MEDIUM | InitFlag.PRIOR_LOW | InitFlag.ASYNC_MASK | InitFlag.COLLECT_PERF_MASK
            | InitFlag.MEM_ALLOC_OUTSIDE | InitFlag.INTERNAL_ALLOC_OUTSIDE | InitFlag.SHARE_WEIGHT_MEM
            | InitFlag.DISABLE_PROC_HIGH_PRIORITY | InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE
            | InitFlag.DISABLE_FLUSH_OUTPUT_MEM_CACHE)

#: why each refused flag is refused
REFUSED = {
    InitFlag.FENCE_IN_OUTSIDE: "fences are not supported (rknnlite binds no fence API; runs are synchronous)",
    InitFlag.FENCE_OUT_OUTSIDE: "fences are not supported (rknnlite binds no fence API; runs are synchronous)",
    InitFlag.COLLECT_MODEL_INFO_ONLY: "info-only contexts are not supported; create the context with "
                                      "InitFlag.MEM_ALLOC_OUTSIDE and call mem_size() before allocating",
    InitFlag.EXECUTE_FALLBACK_PRIOR_DEVICE_GPU: "GPU fallback is not supported",
    InitFlag.ENABLE_SRAM: "on-chip SRAM is not managed by rknnlite",
    InitFlag.SHARE_SRAM: "on-chip SRAM is not managed by rknnlite",
    InitFlag.MODEL_BUFFER_ZERO_COPY: "the model is handed to the runtime as a buffer or a mapped file; "
                                     "a model buffer in rknn_create_mem memory is not supported",
    InitFlag.MEM_FLAG_ALLOC_NO_CONTEXT: "it is a create_mem flag, not an rknn_init flag",
}

#: the flags that make the caller provide model memory
ALLOC_OUTSIDE = InitFlag.MEM_ALLOC_OUTSIDE | InitFlag.INTERNAL_ALLOC_OUTSIDE


def check_init_flags(flags, sharing: bool) -> int:
    """``flags`` as an int when every bit is one a Context implements; ``sharing`` says
    whether ``share_weights_with`` was given (``SHARE_WEIGHT_MEM`` comes with it only).

    Raises:
        InvalidParamError: a refused or unknown flag (named, with why), ``SHARE_WEIGHT_MEM``
            without ``share_weights_with``, or flags that are not an int.
    """
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise InvalidParamError(f"flags must be InitFlag bits (an int), not {flags!r}", op="rknn_init")
    value = int(flags)
    if value < 0:
        raise InvalidParamError(f"flags must be InitFlag bits, not {value}", op="rknn_init")
    for flag, why in REFUSED.items():
        if value & flag:
            raise InvalidParamError(f"InitFlag.{flag.name} (0x{int(flag):x}) is not supported: {why}", op="rknn_init")
    unknown = value & ~int(ACCEPTED)
    if unknown:
        raise InvalidParamError(f"flags 0x{unknown:x} are no InitFlag bits", op="rknn_init")
    if value & InitFlag.SHARE_WEIGHT_MEM and not sharing:
        raise InvalidParamError("InitFlag.SHARE_WEIGHT_MEM needs the context whose weights to share: pass "
                                "share_weights_with=<that Context> (the flag is then set for you)", op="rknn_init")
    if value & InitFlag.PRIOR_MEDIUM and value & InitFlag.PRIOR_LOW:
        raise InvalidParamError("flags set both InitFlag.PRIOR_MEDIUM and InitFlag.PRIOR_LOW; choose one priority",
                                op="rknn_init")
    return value | (int(InitFlag.SHARE_WEIGHT_MEM) if sharing else 0)

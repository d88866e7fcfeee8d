"""Recurrent kernels: LSTM and GRU (forward, reverse, bidirectional), float32.

The input projection of every time step is one matrix product up front; each step
then adds the recurrent product ``H_{t-1} R^T`` and applies the gate activations.
Sequences shorter than ``seq_length`` (``sequence_lens``) stop updating their state
and get zeros in ``Y`` past their end; the reverse direction runs each sequence
backwards from its own last element; an empty sequence gets zero final states
(as onnxruntime does).  See the package docstring for the calling
convention.
"""

from __future__ import annotations

import numpy as np

from ....errors import ModelInvalidError
from . import kernel

_DIRECTIONS = ("forward", "reverse", "bidirectional")


def _sigmoid(x):
    # exp(-|x|) never overflows; both branches of the logistic function share it.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.float32, copy=False)


def _softplus(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(np.float32, copy=False)


# name -> (function of (x, alpha, beta), default alpha, default beta); None: unused.
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x >= a, x, 0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: _softplus(x), None, None),
}


def _activation_list(attrs, op, per_direction, defaults, num_directions):
    """The activation callables, ``per_direction`` per direction, from the attributes.

    ``activation_alpha``/``activation_beta`` are consumed in order by the functions
    that take an alpha/beta; a function finding the list exhausted uses its default.
    """
    names = attrs.get("activations")
    if not names:
        names = list(defaults) * num_directions
    elif len(names) == per_direction and num_directions == 2:
        names = list(names) * 2
    if len(names) != per_direction * num_directions:
        raise ModelInvalidError(f"attribute activations must list {per_direction * num_directions} functions, "
                                f"got {list(names)}", op=op)
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    funcs = []
    for name in names:
        entry = _ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise ModelInvalidError(f"attribute activations: unknown function {name!r}; expected one of "
                                    "Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                                    "HardSigmoid, Elu, Softsign, Softplus", op=op)
        fn, alpha, beta = entry
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        funcs.append(_bind(fn, alpha, beta))
    return [funcs[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]


def _bind(fn, alpha, beta):
    a = np.float32(alpha if alpha is not None else 0.0)
    b = np.float32(beta if beta is not None else 0.0)
    return lambda x: np.asarray(fn(x, a, b), dtype=np.float32)


def _prepare_rnn(op, per_direction, defaults):
    def prepare(attrs, consts):
        direction = attrs.get("direction", "forward")
        if direction not in _DIRECTIONS:
            raise ModelInvalidError(f"attribute direction must be one of {', '.join(_DIRECTIONS)}, "
                                    f"got {direction!r}", op=op)
        if attrs.get("layout", 0) not in (0, 1):
            raise ModelInvalidError(f"attribute layout must be 0 or 1, got {attrs.get('layout')!r}", op=op)
        hidden = attrs.get("hidden_size")
        if hidden is not None and (not isinstance(hidden, int) or hidden <= 0):
            raise ModelInvalidError(f"attribute hidden_size must be a positive int, got {hidden!r}", op=op)
        clip = attrs.get("clip")
        if clip is not None and (not isinstance(clip, (int, float)) or clip <= 0):
            raise ModelInvalidError(f"attribute clip must be a positive float, got {clip!r}", op=op)
        for name in ("input_forget", "linear_before_reset"):
            if attrs.get(name, 0) not in (0, 1):
                raise ModelInvalidError(f"attribute {name} must be 0 or 1, got {attrs.get(name)!r}", op=op)
        nd = 2 if direction == "bidirectional" else 1
        new = dict(attrs)
        new["_activations"] = _activation_list(attrs, op, per_direction, defaults, nd)
        return new

    return prepare


def _optional(inputs, i):
    if len(inputs) > i and inputs[i] is not None and np.asarray(inputs[i]).size > 0:
        return inputs[i]
    return None


class _Sequence:
    """Time-step bookkeeping of one direction: processing order and validity per batch item."""

    def __init__(self, seq_len, batch, lens, reverse):
        self.T, self.B = seq_len, batch
        self.full = lens is None or bool(np.all(lens >= seq_len))
        steps = np.arange(seq_len)[:, None]
        if lens is None:
            lens = np.full(batch, seq_len, np.int64)
        lens = np.minimum(np.asarray(lens, np.int64).reshape(batch), seq_len)
        self.active = steps < lens[None, :]  # (T, B): step s is a real element
        if reverse:
            # Step s handles element lens-1-s of each sequence (padding steps: any valid index).
            order = np.where(self.active, lens[None, :] - 1 - steps, steps)
        else:
            order = np.broadcast_to(steps, (seq_len, batch))
        self.order = order
        self.reverse = reverse
        self.empty = lens == 0  # (B,): sequences with no element

    def final(self, state):
        """Last state of each sequence; zero for empty sequences (as onnxruntime does)."""
        if not self.full and self.empty.any():
            state = np.where(self.empty[:, None], np.float32(0), state)
        return state

    def gather(self, xw):
        """(T, B, G) projections in processing order."""
        if not self.reverse:
            return xw
        if self.full:
            return xw[::-1]
        return xw[self.order, np.arange(self.B)[None, :]]

    def store(self, y, s, h):
        """Write step ``s``'s hidden state (B, H) into ``y`` (T, B, H) at its time index."""
        if self.full:
            y[self.T - 1 - s if self.reverse else s] = h
        else:
            mask = self.active[s]
            y[self.order[s, mask], np.nonzero(mask)[0]] = h[mask]


def _parse(inputs, attrs, op, gates):
    """Common inputs: X as (T, B, I), W, R, bias pair, lengths, initial_h as (nd, B, H)."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    layout = attrs.get("layout", 0)
    if layout == 1:
        x = x.transpose(1, 0, 2)
    seq_len, batch, _ = x.shape
    nd = w.shape[0]
    direction = attrs.get("direction", "forward")
    if nd != (2 if direction == "bidirectional" else 1):
        raise ValueError(f"{op}: W has {nd} directions for direction={direction}")
    hidden = r.shape[-1]
    if attrs.get("hidden_size") is not None and attrs["hidden_size"] != hidden:
        raise ValueError(f"{op}: hidden_size={attrs['hidden_size']} but R has shape {r.shape}")
    if w.shape[1] != gates * hidden or r.shape[1] != gates * hidden:
        raise ValueError(f"{op}: W {w.shape} / R {r.shape} do not hold {gates} gates of {hidden}")
    b = _optional(inputs, 3)
    if b is None:
        b = np.zeros((nd, 2 * gates * hidden), np.float32)
    lens = _optional(inputs, 4)
    h0 = _optional(inputs, 5)
    if h0 is not None and layout == 1:
        h0 = h0.transpose(1, 0, 2)
    return x, w, r, b, lens, h0, seq_len, batch, hidden, nd


def _clip(v, clip):
    if clip is not None:
        np.clip(v, -clip, clip, out=v)
    return v


def _outputs(y, y_h, y_c, layout, out):
    """Final outputs in the requested layout, written into ``out`` when given."""
    if layout == 1:
        y = y.transpose(2, 0, 1, 3)
        y_h = y_h.transpose(1, 0, 2)
        if y_c is not None:
            y_c = y_c.transpose(1, 0, 2)
    results = [y, y_h] + ([y_c] if y_c is not None else [])
    if out is None:
        return [np.ascontiguousarray(v) for v in results]
    final = []
    for i, v in enumerate(results):
        if len(out) > i and out[i] is not None:
            if out[i] is not v:
                np.copyto(out[i], v)
            final.append(out[i])
        else:
            final.append(np.ascontiguousarray(v))
    return final


def _y_buffer(out, shape, layout):
    """Y in layout 0, (T, nd, B, H): the caller's array itself when it can be."""
    if layout == 0 and out is not None and len(out) > 0 and out[0] is not None:
        y = out[0]
        if y.flags.c_contiguous and y.dtype == np.float32 and y.shape == shape:
            y.fill(0)
            return y
    return np.zeros(shape, np.float32)


@kernel("LSTM", out=True, prepare=_prepare_rnn("LSTM", 3, ("Sigmoid", "Tanh", "Tanh")))
def lstm(inputs, attrs, out=None):
    """ONNX LSTM (gates i, o, f, c): returns ``[Y, Y_h, Y_c]``, float32.

    Supports sequence_lens, initial_h/initial_c, peepholes P, clip, input_forget,
    the activations/activation_alpha/activation_beta attributes and layout 0/1
    (Y: (T, nd, B, H) or (B, T, nd, H)).  Writes Y into ``out[0]`` directly in layout 0.
    """
    x, w, r, b, lens, h0, seq_len, batch, hidden, nd = _parse(inputs, attrs, "LSTM", 4)
    c0 = _optional(inputs, 6)
    p = _optional(inputs, 7)
    layout = attrs.get("layout", 0)
    if c0 is not None and layout == 1:
        c0 = c0.transpose(1, 0, 2)
    acts = attrs.get("_activations") or _activation_list(attrs, "LSTM", 3, ("Sigmoid", "Tanh", "Tanh"), nd)
    clip = attrs.get("clip")
    input_forget = attrs.get("input_forget", 0)
    direction = attrs.get("direction", "forward")
    y = _y_buffer(out, (seq_len, nd, batch, hidden), layout)
    y_h = np.zeros((nd, batch, hidden), np.float32)
    y_c = np.zeros((nd, batch, hidden), np.float32)
    hs = hidden
    x2 = x.reshape(seq_len * batch, -1)
    for d in range(nd):
        f, g, h_act = acts[d]
        seq = _Sequence(seq_len, batch, lens, reverse=(direction == "reverse" or d == 1))
        bias = (b[d, :4 * hs] + b[d, 4 * hs:]).astype(np.float32)
        xw = (x2 @ w[d].T).reshape(seq_len, batch, 4 * hs)
        xw += bias
        xw = seq.gather(xw)
        rt = r[d].T
        h = np.zeros((batch, hs), np.float32) if h0 is None else np.array(h0[d], np.float32)
        c = np.zeros((batch, hs), np.float32) if c0 is None else np.array(c0[d], np.float32)
        pi = po = pf = None
        if p is not None:
            pi, po, pf = p[d, :hs], p[d, hs:2 * hs], p[d, 2 * hs:]
        yd = y[:, d]
        for s in range(seq_len):
            gates = xw[s] + h @ rt
            gi, go, gf, gc = (gates[:, k * hs:(k + 1) * hs] for k in range(4))
            if pi is not None:
                gi += pi * c
                gf += pf * c
            i_t = f(_clip(gi, clip))
            if input_forget:
                f_t = 1 - i_t
            else:
                f_t = f(_clip(gf, clip))
            c_t = g(_clip(gc, clip))
            c_new = f_t * c + i_t * c_t
            if po is not None:
                go += po * c_new
            o_t = f(_clip(go, clip))
            h_new = (o_t * h_act(c_new)).astype(np.float32, copy=False)
            if not seq.full:
                keep = ~seq.active[s][:, None]
                h_new = np.where(keep, h, h_new)
                c_new = np.where(keep, c, c_new)
            seq.store(yd, s, h_new)
            h, c = h_new, c_new.astype(np.float32, copy=False)
        y_h[d], y_c[d] = seq.final(h), seq.final(c)
    return _outputs(y, y_h, y_c, layout, out)


@kernel("GRU", out=True, prepare=_prepare_rnn("GRU", 2, ("Sigmoid", "Tanh")))
def gru(inputs, attrs, out=None):
    """ONNX GRU (gates z, r, h): returns ``[Y, Y_h]``, float32.

    Supports sequence_lens, initial_h, linear_before_reset, clip, the activations
    attributes and layout 0/1.  Writes Y into ``out[0]`` directly in layout 0.
    """
    x, w, r, b, lens, h0, seq_len, batch, hidden, nd = _parse(inputs, attrs, "GRU", 3)
    layout = attrs.get("layout", 0)
    acts = attrs.get("_activations") or _activation_list(attrs, "GRU", 2, ("Sigmoid", "Tanh"), nd)
    clip = attrs.get("clip")
    before_reset = attrs.get("linear_before_reset", 0)
    direction = attrs.get("direction", "forward")
    y = _y_buffer(out, (seq_len, nd, batch, hidden), layout)
    y_h = np.zeros((nd, batch, hidden), np.float32)
    hs = hidden
    x2 = x.reshape(seq_len * batch, -1)
    for d in range(nd):
        f, g = acts[d]
        seq = _Sequence(seq_len, batch, lens, reverse=(direction == "reverse" or d == 1))
        wb, rb = b[d, :3 * hs], b[d, 3 * hs:]
        xw = (x2 @ w[d].T).reshape(seq_len, batch, 3 * hs)
        # z and r take both biases up front; h's recurrent bias depends on linear_before_reset.
        xw[..., :2 * hs] += wb[:2 * hs] + rb[:2 * hs]
        xw[..., 2 * hs:] += wb[2 * hs:]
        xw = seq.gather(xw)
        r_zr = r[d, :2 * hs].T
        r_h = r[d, 2 * hs:].T
        rb_h = rb[2 * hs:]
        h = np.zeros((batch, hs), np.float32) if h0 is None else np.array(h0[d], np.float32)
        yd = y[:, d]
        for s in range(seq_len):
            xs = xw[s]
            zr = xs[:, :2 * hs] + h @ r_zr
            z_t = f(_clip(zr[:, :hs], clip))
            r_t = f(_clip(zr[:, hs:], clip))
            if before_reset:
                pre = xs[:, 2 * hs:] + r_t * (h @ r_h + rb_h)
            else:
                pre = xs[:, 2 * hs:] + (r_t * h) @ r_h + rb_h
            h_t = g(_clip(pre, clip))
            h_new = ((1 - z_t) * h_t + z_t * h).astype(np.float32, copy=False)
            if not seq.full:
                h_new = np.where(seq.active[s][:, None], h_new, h)
            seq.store(yd, s, h_new)
            h = h_new
        y_h[d] = seq.final(h)
    return _outputs(y, y_h, None, layout, out)

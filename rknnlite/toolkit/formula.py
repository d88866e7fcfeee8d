"""The transformation formulas of ``onnx_edit`` (RKNN-Toolkit2 §2.1.9.2): parse and plan.

A formula such as ``'ab,c,d,qk[a=2,k=8]->aq,cd,1,kb'`` says how a tensor of the left-hand
layout becomes the right-hand layout:

* ``->`` separates the original character shape (left) from the transformed one (right).
* Each side is a list of dims separated by ``,``.  A dim is either ``1`` or one or more
  letters ``a``-``z``.  No other digit may stand for a dim (the same number twice could not
  say which dim goes where); letters are names with no order of their own
  (``'a,b->b,a'`` and ``'c,a->a,c'`` are the same transform).
* Left side: one dim per dim of the tensor.  ``1`` marks a dim of size 1 (it may be
  dropped on the right).  Several letters in one dim split it (``ab`` over 32: ``a*b=32``);
  an assignment list after the dims, ``[a=2,k=8]``, gives their sizes, and one letter per
  dim may stay unassigned: it is inferred (``b=16``), and must come out a whole number.
* Right side: every left-hand letter exactly once, in any order; several letters in one
  dim merge those dims (``ad``: size ``a*d``, ``a`` the slower-varying); any number of
  ``1`` dims may be inserted.
* Spaces are ignored.

:func:`parse_formula` checks the syntax alone; :func:`plan_transform` fits a parsed formula
to a concrete shape and returns a :class:`TransformPlan`: the transform as at most
Reshape -> Transpose -> Reshape (fewer when steps are no-ops), its inverse, and numpy
application of both.  Every problem raises :class:`FormulaError` (a ``ValueError``)
naming the formula, the position (0-based character offset) and what was expected.

Pure Python and numpy; no onnx import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError

__all__ = ["FormulaError", "Formula", "Step", "TransformPlan", "parse_formula", "plan_transform"]

_OP = "onnx_edit"
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class FormulaError(InvalidParamError):
    """A transformation formula that cannot be parsed or does not fit the tensor.

    Attributes:
        formula: the formula text (``None`` when it was not a string).
        position: 0-based character offset of the problem in ``formula``, or ``None`` when
            the problem is not at one place (e.g. a rank mismatch with the tensor).
    """

    def __init__(self, message: str = "", *, op: Optional[str] = _OP, code: Optional[int] = None,
                 formula: Optional[str] = None, position: Optional[int] = None):
        self.formula = formula
        self.position = position
        super().__init__(message, op=op, code=code)

    def __reduce__(self):
        return (_rebuild, (self.message, self.op, self.formula, self.position))


def _rebuild(message, op, formula, position):
    return FormulaError(message, op=op, formula=formula, position=position)


def _fail(text: str, position: Optional[int], what: str) -> FormulaError:
    where = f" at position {position}" if position is not None else ""
    if position is not None and position < len(text):
        where += f" ({text[position]!r})"
    elif position is not None:
        where += " (end of formula)"
    return FormulaError(f"transformation formula {text!r}{where}: {what}", formula=text, position=position)


#: One dim of a character shape: its letters in order; ``()`` is the dim ``1``.
Dim = Tuple[str, ...]


@dataclass(frozen=True)
class Formula:
    """A parsed formula (syntax checked, not yet fitted to a shape).

    Attributes:
        text: the formula as given.
        src: the left-hand dims (``()`` for ``1``).
        dst: the right-hand dims (``()`` for ``1``).
        assigned: the sizes given in the ``[...]`` list, by letter.
        src_pos: character offset of each left-hand dim (for error messages).
        assign_pos: character offset of each assignment, by letter.
    """

    text: str
    src: Tuple[Dim, ...]
    dst: Tuple[Dim, ...]
    assigned: Dict[str, int]
    src_pos: Tuple[int, ...]
    assign_pos: Dict[str, int]


class _Scanner:
    """Characters of the formula with their offsets, spaces skipped."""

    def __init__(self, text: str, start: int, end: int):
        self.text = text
        self.items = [(i, text[i]) for i in range(start, end) if not text[i].isspace()]
        self.k = 0
        self.end = end

    def peek(self) -> Optional[str]:
        return self.items[self.k][1] if self.k < len(self.items) else None

    def pos(self) -> int:
        return self.items[self.k][0] if self.k < len(self.items) else self.end

    def take(self) -> str:
        ch = self.items[self.k][1]
        self.k += 1
        return ch


def parse_formula(text) -> Formula:
    """Parse and check the syntax of a formula (``'a,b,c,d->1,ad,b,c'``).

    Checks everything that does not depend on the tensor's shape: the ``->``, the
    allowed characters, empty dims, ``1`` standing alone, letters unique on each side and
    the same letters on both sides, and the ``[letter=int,...]`` assignment list (only
    on the left, after the dims, naming left-hand letters once each with sizes >= 1).
    Raises :class:`FormulaError`.
    """
    if not isinstance(text, str):
        raise FormulaError(f"a transformation formula must be a str like 'a,b,c->a,1,cb', "
                           f"not {type(text).__name__} {text!r}")
    arrow = text.find("->")
    if arrow < 0:
        raise _fail(text, None, "expected two character shapes separated by '->', like 'a,b,c->a,1,cb'")
    second = text.find("->", arrow + 2)
    if second >= 0:
        raise _fail(text, second, "expected exactly one '->'")
    left = _Scanner(text, 0, arrow)
    src, src_pos, src_at = _parse_dims(text, left, "left", allow_assign=True)
    assigned: Dict[str, int] = {}
    assign_pos: Dict[str, int] = {}
    if left.peek() == "[":
        _parse_assignments(text, left, assigned, assign_pos)
        if left.peek() is not None:
            raise _fail(text, left.pos(), "the '[...]' assignment list must end the left side; expected '->'")
    right = _Scanner(text, arrow + 2, len(text))
    dst, _, dst_at = _parse_dims(text, right, "right", allow_assign=False)

    src_letters = _unique_letters(text, src_at, "left")
    dst_letters = _unique_letters(text, dst_at, "right")
    for letter, pos in dst_letters.items():
        if letter not in src_letters:
            raise _fail(text, pos, f"letter {letter!r} is not on the left side; the right side may only "
                                   f"rearrange the left side's letters ({', '.join(src_letters)}) and add '1's")
    missing = [letter for letter in src_letters if letter not in dst_letters]
    if missing:
        raise _fail(text, src_letters[missing[0]],
                    f"letter {missing[0]!r} is missing on the right side; every letter of the left side "
                    f"must appear on the right side exactly once (missing: {', '.join(missing)})")
    for letter, pos in assign_pos.items():
        if letter not in src_letters:
            raise _fail(text, pos, f"assignment to {letter!r}, which is not a letter of the left side "
                                   f"({', '.join(src_letters)})")
    return Formula(text, tuple(src), tuple(dst), assigned, tuple(src_pos), assign_pos)


def _parse_dims(text: str, sc: _Scanner, side: str,
                allow_assign: bool) -> Tuple[List[Dim], List[int], List[Tuple[str, int]]]:
    """Dims up to ``[`` or the end; returns the dims, their offsets and ``(letter, offset)``s."""
    dims: List[Dim] = []
    positions: List[int] = []
    letter_at: List[Tuple[str, int]] = []
    while True:
        start = sc.pos()
        letters: List[str] = []
        ones: List[int] = []
        while True:
            ch = sc.peek()
            if ch is None or ch in ",[":
                break
            if ch == "1":
                ones.append(sc.pos())
            elif ch in _LETTERS:
                letters.append(ch)
                letter_at.append((ch, sc.pos()))
            elif ch.isdigit():
                raise _fail(text, sc.pos(), "the only number allowed in a character shape is '1'; name other "
                                            "dims with letters a-z (equal numbers could not say which dim "
                                            "goes where)")
            elif ch == "]" or ch == "=":
                raise _fail(text, sc.pos(), "expected a letter a-z, '1' or ','"
                            + (" ('=' and ']' belong inside a '[...]' assignment list)" if allow_assign else ""))
            else:
                raise _fail(text, sc.pos(), f"expected a letter a-z, '1' or ','; {ch!r} is not allowed"
                            + (" (letters are lower case)" if ch.isalpha() else ""))
            sc.take()
        if not letters and not ones:
            raise _fail(text, sc.pos(), f"empty dim on the {side} side; expected '1' or letters a-z")
        if ones and (letters or len(ones) > 1):
            raise _fail(text, ones[0], "'1' must stand alone as a dim (like 'a,1,b'), not be combined "
                                       "with letters or other '1's")
        dims.append(tuple(letters))
        positions.append(start)
        ch = sc.peek()
        if ch == ",":
            sc.take()
            continue
        if ch == "[" and not allow_assign:
            raise _fail(text, sc.pos(), "a '[...]' assignment list belongs at the end of the left side")
        return dims, positions, letter_at


def _parse_assignments(text: str, sc: _Scanner, assigned: Dict[str, int], assign_pos: Dict[str, int]) -> None:
    sc.take()  # '['
    while True:
        pos = sc.pos()
        ch = sc.peek()
        if ch is None or ch not in _LETTERS:
            raise _fail(text, pos, "expected an assignment 'letter=size' like 'a=2'")
        letter = sc.take()
        if sc.peek() != "=":
            raise _fail(text, sc.pos(), f"expected '=' after {letter!r} in the assignment list")
        sc.take()
        num_pos = sc.pos()
        digits = ""
        while sc.peek() is not None and sc.peek().isdigit():
            digits += sc.take()
        if not digits:
            raise _fail(text, num_pos, f"expected a whole number after '{letter}='")
        value = int(digits)
        if value < 1:
            raise _fail(text, num_pos, f"{letter}={value}: a dim size must be at least 1")
        if letter in assigned:
            raise _fail(text, pos, f"{letter!r} is assigned twice")
        assigned[letter] = value
        assign_pos[letter] = pos
        ch = sc.peek()
        if ch == ",":
            sc.take()
            continue
        if ch == "]":
            sc.take()
            return
        raise _fail(text, sc.pos(), "expected ',' or ']' in the assignment list")


def _unique_letters(text: str, letter_at: Sequence[Tuple[str, int]], side: str) -> Dict[str, int]:
    """``{letter: offset}`` in order of appearance; a letter used twice on one side fails."""
    seen: Dict[str, int] = {}
    for letter, pos in letter_at:
        if letter in seen:
            raise _fail(text, pos, f"letter {letter!r} appears twice on the {side} side; each letter "
                                   f"names one dim and may appear once per side")
        seen[letter] = pos
    return seen


# -- planning ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One op of a plan: ``kind`` ``"reshape"`` (``value``: the new shape) or
    ``"transpose"`` (``value``: the permutation, ONNX ``perm`` semantics)."""

    kind: str
    value: Tuple[int, ...]


@dataclass(frozen=True)
class TransformPlan:
    """A formula fitted to a shape.

    Attributes:
        formula: the formula text.
        src_shape: the tensor's shape (the left side).
        dst_shape: the transformed shape (the right side).
        sizes: the size of every letter (given or inferred).
        steps: the forward transform (``src_shape`` -> ``dst_shape``) as at most
            reshape, transpose, reshape; empty when it changes nothing.
        inverse_steps: the inverse transform (``dst_shape`` -> ``src_shape``).
    """

    formula: str
    src_shape: Tuple[int, ...]
    dst_shape: Tuple[int, ...]
    sizes: Dict[str, int]
    steps: Tuple[Step, ...]
    inverse_steps: Tuple[Step, ...]

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The transformed array (``src_shape`` -> ``dst_shape``); a view of ``x`` when
        numpy can make one, so copy it before writing into it."""
        return _run(self.steps, self.src_shape, x, self.formula)

    def apply_inverse(self, x: np.ndarray) -> np.ndarray:
        """The original layout back (``dst_shape`` -> ``src_shape``); a view when possible."""
        return _run(self.inverse_steps, self.dst_shape, x, self.formula)


def _run(steps, shape, x, formula) -> np.ndarray:
    x = np.asarray(x)
    if tuple(x.shape) != tuple(shape):
        raise FormulaError(f"transformation formula {formula!r} applies to shape {list(shape)}, "
                           f"not {list(x.shape)}", formula=formula)
    for step in steps:
        x = x.reshape(step.value) if step.kind == "reshape" else x.transpose(step.value)
    return x


def plan_transform(formula, shape: Sequence[int], what: str = "tensor") -> TransformPlan:
    """Fit ``formula`` (text or :class:`Formula`) to ``shape`` and plan it.

    ``what`` names the tensor in error messages (``"input 'x'"``).  Fails with
    :class:`FormulaError` when the left side's dim count differs from the rank, a ``1``
    stands over a dim that is not 1, a shape dim is unknown (``-1``/``None``), a split
    has more than one unassigned letter, or the sizes do not multiply to the dim (an
    inferred size that is not a whole number).
    """
    f = formula if isinstance(formula, Formula) else parse_formula(formula)
    text = f.text
    dims = _static_shape(text, shape, what)
    if len(f.src) != len(dims):
        raise _fail(text, None, f"the left side has {len(f.src)} dim(s), but {what} has rank {len(dims)} "
                                f"(shape {list(dims)}); give one dim per axis, e.g. "
                                f"{_example(len(dims))!r}")
    sizes = _letter_sizes(f, dims, what)

    atoms = [c for dim in f.src for c in dim if sizes[c] > 1]
    order = [c for dim in f.dst for c in dim if sizes[c] > 1]
    dst_shape = tuple(int(np.prod([sizes[c] for c in dim], dtype=np.int64)) for dim in f.dst)
    blocks = _blocks([atoms.index(c) for c in order])  # runs of atoms that stay together
    src_blocks = sorted(blocks)
    steps: List[Step] = []
    if blocks != src_blocks:
        block_shape = tuple(int(np.prod([sizes[atoms[i]] for i in b], dtype=np.int64)) for b in src_blocks)
        perm = tuple(src_blocks.index(b) for b in blocks)
        if block_shape != dims:
            steps.append(Step("reshape", block_shape))
        steps.append(Step("transpose", perm))
        moved = tuple(block_shape[p] for p in perm)
        if moved != dst_shape:
            steps.append(Step("reshape", dst_shape))
    elif dims != dst_shape:
        steps.append(Step("reshape", dst_shape))
    return TransformPlan(text, dims, dst_shape, sizes, tuple(steps), _inverse(steps, dims))


def _example(rank: int) -> str:
    letters = ",".join(_LETTERS[:rank])
    return f"{letters}->{letters}"


def _static_shape(text: str, shape, what: str) -> Tuple[int, ...]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise _fail(text, None, f"{what} has no known shape") from None
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
            raise _fail(text, None, f"{what} has shape {list(dims)}; transformation formulas need every dim "
                                    f"known and >= 1 (fix the dynamic dims first)")
    return tuple(int(d) for d in dims)


def _letter_sizes(f: Formula, dims: Tuple[int, ...], what: str) -> Dict[str, int]:
    text = f.text
    sizes: Dict[str, int] = {}
    for axis, (dim, size, pos) in enumerate(zip(f.src, dims, f.src_pos)):
        if not dim:
            if size != 1:
                raise _fail(text, pos, f"'1' stands over axis {axis} of {what}, which is {size} "
                                       f"(shape {list(dims)}); name it with a letter")
            continue
        known = [c for c in dim if c in f.assigned]
        free = [c for c in dim if c not in f.assigned]
        product = int(np.prod([f.assigned[c] for c in known], dtype=np.int64))
        label = "".join(dim)
        given = ", ".join(f"{c}={f.assigned[c]}" for c in known)
        if len(free) > 1:
            raise _fail(text, pos, f"cannot infer the sizes of {', '.join(free)} in {label!r} (axis {axis} = "
                                   f"{size}): assign all but one of them, e.g. [{free[0]}=...]")
        if len(free) == 1:
            if size % product:
                raise _fail(text, f.assign_pos[known[0]] if known else pos,
                            f"{label}={size} with {given} gives {free[0]}={size / product:g}, which is not a "
                            f"whole number; the sizes in a split must divide the dim")
            sizes[free[0]] = size // product
        elif product != size:
            got = f"it is assigned {given}" if len(known) == 1 else f"{given} multiply to {product}"
            raise _fail(text, f.assign_pos[known[0]],
                        f"{label} must equal axis {axis} of {what} ({size}), but {got}")
        for c in known:
            sizes[c] = f.assigned[c]
    return sizes


def _blocks(perm: List[int]) -> List[Tuple[int, ...]]:
    """Split ``perm`` (source atom indices in target order) into maximal runs of
    consecutive indices: each run can move as one merged axis."""
    blocks: List[Tuple[int, ...]] = []
    run: List[int] = []
    for i in perm:
        if run and i == run[-1] + 1:
            run.append(i)
        else:
            if run:
                blocks.append(tuple(run))
            run = [i]
    if run:
        blocks.append(tuple(run))
    return blocks


def _inverse(steps: Sequence[Step], src_shape: Tuple[int, ...]) -> Tuple[Step, ...]:
    shapes = [src_shape]
    for step in steps:
        cur = shapes[-1]
        shapes.append(step.value if step.kind == "reshape" else tuple(cur[p] for p in step.value))
    out: List[Step] = []
    for step, before in zip(reversed(steps), reversed(shapes[:-1])):
        if step.kind == "reshape":
            out.append(Step("reshape", before))
        else:
            out.append(Step("transpose", tuple(int(p) for p in np.argsort(step.value))))
    return tuple(out)

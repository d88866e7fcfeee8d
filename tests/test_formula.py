"""The onnx_edit transformation-formula grammar (seed 001 §2.1.9.2/§2.1.9.3): parsing,
fitting to shapes, planning as Reshape/Transpose steps, and every error case."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rknnlite.errors import InvalidParamError
from rknnlite.toolkit.formula import FormulaError, parse_formula, plan_transform


def _x(shape):
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)


# Every formula of the seed with a numpy reference written independently of the planner.
SEED_EXAMPLES = [
    # 3-D -> 4-D
    ("a,b,c->a,b,1,c", (2, 3, 4), lambda x: x.reshape(2, 3, 1, 4)),
    # 5-D -> 4-D
    ("a,b,c,d,e->ab,c,d,e", (2, 3, 4, 5, 6), lambda x: x.reshape(6, 4, 5, 6)),
    # transpose(0,3,1,2)
    ("a,b,c,d->a,d,b,c", (2, 3, 4, 5), lambda x: x.transpose(0, 3, 1, 2)),
    # transpose and merge
    ("a,b,c,d->d,acb,1", (2, 3, 4, 5), lambda x: x.transpose(3, 0, 2, 1).reshape(5, 24, 1)),
    # split, transpose, merge: a=3, bc=6 (b=2, c=3), de=8 (d=4, e=2), f=5
    ("a,bc,de,f[b=2,d=4]->ab,fe,dc,1", (3, 6, 8, 5),
     lambda x: x.reshape(3, 2, 3, 4, 2, 5).transpose(0, 1, 5, 4, 3, 2).reshape(6, 10, 12, 1)),
    # the split example over [32,4,1,64] (with the seed's space in "k =8")
    ("ab,c,d,qk[a=2,k =8]->aq,cd,1,kb", (32, 4, 1, 64),
     lambda x: x.reshape(2, 16, 4, 1, 8, 8).transpose(0, 4, 2, 3, 5, 1).reshape(16, 4, 1, 128)),
    # '1' on the left over a dim of size 1, dropped on the right
    ("a,1,c,d->ac,d,1", (2, 1, 3, 4), lambda x: x.reshape(6, 4, 1)),
    # the input [32,4,1,64] written 'a,b,1,d'
    ("a,b,1,d->a,b,1,d", (32, 4, 1, 64), lambda x: x),
    # inserted 1s, with spaces
    ("a,b,c-> a,1,cb,1,1", (2, 3, 4), lambda x: x.transpose(0, 2, 1).reshape(2, 1, 12, 1, 1)),
    # the interface example's formulas
    ("a,b,c,d->1,ad,b,c", (2, 3, 4, 5), lambda x: x.transpose(0, 3, 1, 2).reshape(1, 10, 3, 4)),
    ("a,b,c,d->1,ab,c,d", (2, 3, 4, 5), lambda x: x.reshape(1, 6, 4, 5)),
]


@pytest.mark.parametrize("formula,shape,reference", SEED_EXAMPLES, ids=[e[0] for e in SEED_EXAMPLES])
def test_seed_examples_match_numpy_reference(formula, shape, reference):
    plan = plan_transform(formula, shape)
    x = _x(shape)
    want = reference(x)
    got = plan.apply(x)
    assert plan.dst_shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(plan.apply_inverse(want), x)
    # at most reshape -> transpose -> reshape
    kinds = [s.kind for s in plan.steps]
    assert len(kinds) <= 3 and kinds.count("transpose") <= 1
    assert "reshape" not in kinds[1:-1] or kinds.count("transpose") == 0


def test_letters_have_no_order_of_their_own():
    x = _x((3, 4))
    a = plan_transform("a,b->b,a", x.shape)
    c = plan_transform("c,a->a,c", x.shape)
    np.testing.assert_array_equal(a.apply(x), c.apply(x))
    assert a.steps == c.steps


def test_identity_and_pure_reshape_plans_are_minimal():
    assert plan_transform("a,b,c->a,b,c", (2, 3, 4)).steps == ()
    steps = plan_transform("a,b,c->ab,c", (2, 3, 4)).steps
    assert [s.kind for s in steps] == ["reshape"]
    # size-1 dims never force a transpose
    steps = plan_transform("a,b,c->b,a,c", (1, 3, 4)).steps
    assert [s.kind for s in steps] == ["reshape"]
    # adjacent letters that stay together move as one axis: rank-3 transpose, not rank-4
    plan = plan_transform("a,b,c,d->c,d,a,b", (2, 3, 4, 5))
    transpose = [s for s in plan.steps if s.kind == "transpose"][0]
    assert transpose.value == (1, 0)


def test_inferred_and_assigned_sizes():
    plan = plan_transform("ab,c[a=2]->b,a,c", (32, 3))
    assert plan.sizes == {"a": 2, "b": 16, "c": 3}
    plan = plan_transform("ab,c[a=2,b=16]->b,a,c", (32, 3))
    assert plan.sizes["b"] == 16
    # a single letter may be assigned its own size
    assert plan_transform("a,b[a=32]->b,a", (32, 3)).dst_shape == (3, 32)


def test_parse_result_structure():
    f = parse_formula(" ab , 1 ,c [ a = 2 ] -> c,1,ba ")
    assert f.src == (("a", "b"), (), ("c",))
    assert f.dst == (("c",), (), ("b", "a"))
    assert f.assigned == {"a": 2}


@pytest.mark.parametrize("formula,position,words", [
    ("a,b,c", None, "'->'"),
    ("a->b->a", 4, "exactly one '->'"),
    ("a,2->a", 2, "only number allowed"),
    ("a,10->a", 3, "only number allowed"),
    ("a,11->a", 2, "'1' must stand alone"),
    ("a,B->a,B", 2, "lower case"),
    ("a,b;c->a,b", 3, "not allowed"),
    ("a,,b->a,b", 2, "empty dim"),
    ("a,b,->a,b", 4, "empty dim"),
    ("->a", 0, "empty dim"),
    ("a->", 3, "empty dim"),
    ("a1,b->a,b", 1, "'1' must stand alone"),
    ("a,b->1a,b", 5, "'1' must stand alone"),
    ("aa->a", 1, "appears twice on the left"),
    ("a,b->a,b,a", 9, "appears twice on the right"),
    ("a,b->a,b,c", 9, "not on the left side"),
    ("a,1,c,d->ac,1", 6, "'d' is missing on the right"),
    ("a,b->b,a[a=1]", 8, "end of the left side"),
    ("ab[a=2]c->ab", 7, "must end the left side"),
    ("ab[a=2->ab", 6, "',' or ']'"),
    ("ab[2=a]->ab", 3, "'letter=size'"),
    ("ab[a2]->ab", 4, "'='"),
    ("ab[a=]->ab", 5, "whole number"),
    ("ab[a=0]->ab", 5, "at least 1"),
    ("ab[a=2,a=2]->ab", 7, "assigned twice"),
    ("ab[c=2]->ab", 3, "not a letter of the left side"),
    ("a]->a", 1, "assignment list"),
])
def test_syntax_errors_name_formula_position_and_expectation(formula, position, words):
    with pytest.raises(FormulaError) as info:
        parse_formula(formula)
    e = info.value
    assert isinstance(e, InvalidParamError) and isinstance(e, ValueError)
    assert e.formula == formula
    assert e.position == position
    assert repr(formula) in str(e)
    assert words in str(e)
    if position is not None:
        assert f"position {position}" in str(e)


@pytest.mark.parametrize("formula,shape,position,words", [
    # the seed's example: ab=32 with a=5 would give b=6.4
    ("ab,c,d,qk[a=5,k=8]->aq,cd,1,kb", (32, 4, 1, 64), 10, "b=6.4"),
    ("ab,c->b,a,c", (32, 3), 0, "cannot infer the sizes of a, b"),
    ("abc,d[a=2]->d,cba", (24, 3), 0, "cannot infer the sizes of b, c"),
    ("ab[a=2,b=3]->ab", (4,), 3, "multiply to 6"),
    ("a,b[a=5]->b,a", (4, 3), 4, "it is assigned a=5"),
    ("a,1->a", (2, 3), 2, "'1' stands over axis 1"),
    ("a,b->b,a", (2, 3, 4), None, "has rank 3"),
    ("a,b,c,d->a,d,b,c", (32, 4, 64), None, "has rank 3"),
])
def test_shape_errors(formula, shape, position, words):
    with pytest.raises(FormulaError) as info:
        plan_transform(formula, shape, "input 'x'")
    assert info.value.position == position
    assert words in str(info.value)
    assert repr(formula) in str(info.value)


@pytest.mark.parametrize("shape", [(-1, 3), (None, 3), (0, 3), (2.5, 3)])
def test_unknown_dims_are_refused(shape):
    with pytest.raises(FormulaError, match="every dim known"):
        plan_transform("a,b->b,a", shape, "input 'x'")


def test_non_string_formula():
    with pytest.raises(FormulaError, match="must be a str"):
        parse_formula(["a->a"])


def test_apply_checks_the_shape():
    plan = plan_transform("a,b->b,a", (2, 3))
    with pytest.raises(FormulaError, match=r"applies to shape \[2, 3\]"):
        plan.apply(np.zeros((3, 2)))
    with pytest.raises(FormulaError, match=r"applies to shape \[3, 2\]"):
        plan.apply_inverse(np.zeros((2, 3)))


def test_error_pickles_with_its_details():
    with pytest.raises(FormulaError) as info:
        parse_formula("a,2->a")
    e = pickle.loads(pickle.dumps(info.value))
    assert isinstance(e, FormulaError)
    assert (e.formula, e.position, str(e)) == ("a,2->a", 2, str(info.value))

"""tools/bench/bench_layers.py: matching rknnlite's profiled steps with onnxruntime's profile by
what each layer computes (the timings themselves are never asserted)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "bench"))

from bench_layers import chw, compare, layer_key  # noqa: E402


def test_blocked_nchwc_shapes_read_as_channels_height_width():
    assert chw((1, 4, 28, 28, 16)) == (64, 28, 28)     # onnxruntime's NCHWc: 4 blocks of 16 channels
    assert chw((1, 64, 28, 28)) == (64, 28, 28)
    assert chw((1, 1000)) == (1, 1000)


def test_a_conv_is_keyed_by_what_it_computes_whatever_its_runtime_calls_it():
    ours = layer_key("Conv", [(1, 64, 56, 56), (256, 64, 1, 1), (256,)], [(1, 256, 56, 56)])
    fused = layer_key("FusedConv", [(1, 64, 56, 56), (256, 64, 1, 1)], [(1, 256, 56, 56)])
    blocked = layer_key("NchwcConv", [(1, 4, 56, 56, 16), (256, 64, 1, 1)], [(1, 16, 56, 56, 16)])
    assert ours == fused == blocked == ("Conv", (64, 56, 56), (1, 1), (256, 56, 56))
    assert layer_key("Conv", [(1, 64, 56, 56), (256, 64, 3, 3)], [(1, 256, 56, 56)]) != ours
    assert layer_key("MaxPool", [(1, 64, 112, 112)], [(1, 64, 56, 56)]) == ("MaxPool",)


def test_layers_of_one_key_are_summed_and_the_biggest_loss_comes_first():
    conv = ("Conv", (64, 56, 56), (1, 1), (256, 56, 56))
    ours = [(conv, 100.0), (conv, 110.0), (("MaxPool",), 50.0), (("Concat",), 5.0)]
    theirs = [(conv, 90.0), (("MaxPool",), 20.0), (("Concat",), 30.0), (("ReorderOutput",), 7.0)]
    rows = compare(ours, theirs)
    assert rows[0] == (conv, 210.0, 90.0, 2, 1)
    assert [r[0] for r in rows] == [conv, ("MaxPool",), ("ReorderOutput",), ("Concat",)]
    assert rows[2] == (("ReorderOutput",), 0.0, 7.0, 0, 1)   # a node only one side has

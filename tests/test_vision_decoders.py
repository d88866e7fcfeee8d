"""rknnlite.vision decoders against the straightforward references of vision_reference.py
on the same raw outputs, float32 and int8 (thresholded on the codes)."""

from __future__ import annotations

import numpy as np
import pytest

import vision_reference as ref
from rknnlite import InvalidParamError
from rknnlite.vision import (SCRFD, YOLO11, YOLOX, Detections, RetinaFace, YOLOv5, YOLOv7, YOLOv8, YOLOv8Pose,
                             YOLOv8Seg, box_iou, dfl_distances, retinaface_priors, segmentation_mask,
                             top_k)

SIZE = (64, 96)            # model input (height, width): grids 8x12, 4x6, 2x3
GRIDS = [(8, 12), (4, 6), (2, 3)]
PROB_Q = (1 / 255, -128)   # int8 quantization of values in [0, 1]


def assert_same(dets: Detections, kept, score_tol: float):
    """Every reference detection has its own match: same class, IoU >= 0.99, close score."""
    assert len(dets) == len(kept), (len(dets), len(kept))
    assert len(kept) > 0, "the case must produce detections"
    free = np.ones(len(dets), bool)
    for box, score, cls, _ in kept:
        ious = box_iou(dets.boxes, np.array([box], np.float32))[:, 0]
        ious[(dets.class_ids != cls) | ~free] = -1
        j = int(np.argmax(ious))
        assert ious[j] >= 0.99, (box, dets.boxes[j])
        assert abs(float(dets.scores[j]) - float(score)) <= score_tol
        free[j] = False


def assert_mask(got, expected):
    """Masks agree except where the reference is within float32 rounding of flipping."""
    mask, margin = expected
    differ = got != mask
    assert not (differ & (margin > 1e-3)).any(), np.argwhere(differ & (margin > 1e-3))
    assert differ.sum() <= 2


def probs(rng, shape, hot=0.15):
    """Values in [0, 1], mostly small, a fraction ``hot`` of them high."""
    p = rng.uniform(0, 0.2, shape)
    mask = rng.random(shape) < hot
    p[mask] = rng.uniform(0.3, 1.0, mask.sum())
    return p.astype(np.float32)


def maybe_quantize(outs, int8, q=PROB_Q):
    if not int8:
        return outs, None
    qs = [q if not isinstance(q, list) else q[i] for i in range(len(outs))] if not isinstance(q, list) else q
    return [ref.quantize(y, *qq) for y, qq in zip(outs, qs)], qs


# -- YOLOv5 / YOLOv7 ------------------------------------------------------------------------------

def v5_heads(rng, nc=4, na=3):
    outs = []
    for h, w in GRIDS:
        y = rng.uniform(0, 1, (1, na, 5 + nc, h, w)).astype(np.float32)
        y[:, :, 4] = probs(rng, (1, na, h, w), 0.2)
        y[:, :, 5:] = probs(rng, (1, na, nc, h, w), 0.5) ** 0.5
        outs.append(y.reshape(1, na * (5 + nc), h, w))
    return outs


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("cls", [YOLOv5, YOLOv7])
def test_yolov5_and_v7_match_the_reference(cls, int8):
    outs, qs = maybe_quantize(v5_heads(np.random.default_rng(1)), int8)
    dec = cls(input_size=SIZE, conf=0.25, iou=0.45)
    kept = ref.yolov5(outs, dec.anchors.tolist(), SIZE, 0.25, 0.45, qs)
    assert_same(dec(outs, qs), kept, PROB_Q[0] if int8 else 1e-5)


def test_yolov5_logits_take_the_sigmoid_and_threshold_at_the_logit():
    outs = v5_heads(np.random.default_rng(2))
    logits = [np.log(np.clip(y, 1e-6, 1 - 1e-6) / (1 - np.clip(y, 1e-6, 1 - 1e-6))).astype(np.float32) for y in outs]
    expected = YOLOv5(input_size=SIZE)(outs)
    got = YOLOv5(input_size=SIZE, logits=True)(logits)
    assert len(got) == len(expected) > 0
    np.testing.assert_allclose(got.boxes, expected.boxes, atol=1e-3)
    np.testing.assert_allclose(got.scores, expected.scores, atol=1e-5)


# -- YOLOX --------------------------------------------------------------------------------------

@pytest.mark.parametrize("int8", [False, True])
def test_yolox_matches_the_reference(int8):
    rng = np.random.default_rng(3)
    nc = 3
    outs = []
    for h, w in GRIDS:
        y = np.empty((1, 5 + nc, h, w), np.float32)
        y[0, :2] = rng.uniform(-0.5, 1.5, (2, h, w))
        y[0, 2:4] = rng.uniform(-1, 1.5, (2, h, w))
        y[0, 4:5] = probs(rng, (1, h, w), 0.3)
        y[0, 5:] = probs(rng, (nc, h, w), 0.5) ** 0.5
        outs.append(y)
    q = (3 / 255, -43)  # [-0.5, 2.5]
    outs_q, qs = maybe_quantize(outs, int8, q)
    kept = ref.yolox(outs_q, SIZE, 0.25, 0.45, qs)
    assert_same(YOLOX(input_size=SIZE)(outs_q, qs), kept, 3 / 255 if int8 else 1e-5)


# -- YOLOv8 / YOLO11 ---------------------------------------------------------------------------------

def v8_concat(rng, nc=5, extra=0, n=None):
    n = n or sum(h * w for h, w in GRIDS)
    y = np.empty((1, 4 + nc + extra, n), np.float32)
    y[0, 0] = rng.uniform(0, SIZE[1], n)
    y[0, 1] = rng.uniform(0, SIZE[0], n)
    y[0, 2:4] = rng.uniform(4, 30, (2, n))
    y[0, 4:4 + nc] = probs(rng, (nc, n), 0.1)
    y[0, 4 + nc:] = rng.normal(0, 1, (extra, n))
    return y


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("cls", [YOLOv8, YOLO11])
def test_yolov8_concatenated_matches_the_reference(cls, int8, transposed):
    y = v8_concat(np.random.default_rng(4))
    q = (100 / 255, -128)  # one scale for pixels and scores, as a single int8 tensor has
    if transposed:
        y = np.ascontiguousarray(y.transpose(0, 2, 1))
    outs, qs = maybe_quantize([y], int8, q)
    kept = ref.yolov8_concat(outs[0], 5, 0.25, 0.45, None if qs is None else qs[0])
    assert_same(cls(num_classes=5)(outs, qs), kept, q[0] if int8 else 1e-5)


def v8_split(rng, nc=5, with_sum=True, coeff=0):
    outs = []
    for h, w in GRIDS:
        outs.append(rng.normal(0, 2, (1, 64, h, w)).astype(np.float32))
        cls = probs(rng, (1, nc, h, w), 0.1)
        outs.append(cls)
        if with_sum:
            outs.append(np.clip(cls.sum(1, keepdims=True), 0, 1))
        if coeff:
            outs.append(rng.normal(0, 1, (1, coeff, h, w)).astype(np.float32))
    return outs


@pytest.mark.parametrize("with_sum", [True, False])
@pytest.mark.parametrize("int8", [False, True])
def test_yolov8_split_heads_match_the_reference(int8, with_sum):
    outs = v8_split(np.random.default_rng(5), with_sum=with_sum)
    per = 3 if with_sum else 2
    qs = None
    if int8:
        qs = [((12 / 255, 0) if k % per == 0 else PROB_Q) for k in range(len(outs))]
        outs = [ref.quantize(y, *q) for y, q in zip(outs, qs)]
    kept = ref.yolov8_split(outs, 5, SIZE, 0.25, 0.45, qs, per=per)
    assert_same(YOLOv8(num_classes=5, input_size=SIZE)(outs, qs), kept, PROB_Q[0] if int8 else 1e-5)


def test_split_score_sum_only_skips_cells_it_may_skip():
    # a sum output below conf hides the cell; at/above it the classes decide
    rng = np.random.default_rng(6)
    outs = v8_split(rng)
    dec = YOLOv8(num_classes=5, input_size=SIZE)
    full = dec(outs)
    for k in (2, 5, 8):
        outs[k] = np.zeros_like(outs[k])
    assert len(full) > 0 and len(dec(outs)) == 0


@pytest.mark.parametrize("int8", [False, True])
def test_yolov8_seg_masks_match_the_reference(int8):
    rng = np.random.default_rng(7)
    y = v8_concat(rng, nc=3, extra=8)
    proto = rng.normal(0, 1, (1, 8, 16, 24)).astype(np.float32)
    outs, qs = [y, proto], None
    if int8:
        qs = [(100 / 255, -128), (8 / 255, 0)]
        outs = [ref.quantize(a, *q) for a, q in zip(outs, qs)]
    dec = YOLOv8Seg(num_classes=3, input_size=SIZE, mask_dim=8)
    dets = dec(outs, qs)
    kept = ref.yolov8_concat(outs[0], 3, 0.25, 0.45, None if qs is None else qs[0], extra=8)
    assert_same(dets, kept, 100 / 255 if int8 else 1e-5)
    masks = ref.seg_masks(kept, outs[1], SIZE, None if qs is None else qs[1])
    order = [int(np.argmax(box_iou(dets.boxes, np.array([k[0]], np.float32))[:, 0])) for k in kept]
    assert dets.masks.shape == (len(kept), 16, 24) and dets.masks.dtype == bool
    for j, m in zip(order, masks):
        assert_mask(dets.masks[j], m)
    assert any(m.any() for m, _ in masks)


def test_yolov8_seg_split_heads_with_prototypes():
    rng = np.random.default_rng(8)
    outs = v8_split(rng, coeff=8) + [rng.normal(0, 1, (1, 8, 16, 24)).astype(np.float32)]
    dets = YOLOv8Seg(num_classes=5, input_size=SIZE, mask_dim=8, split=True)(outs)
    kept = ref.yolov8_split(outs[:-1], 5, SIZE, 0.25, 0.45, per=4, coeff=True)
    assert_same(dets, kept, 1e-5)
    masks = ref.seg_masks(kept, outs[-1], SIZE)
    for k, m in zip(kept, masks):
        j = int(np.argmax(box_iou(dets.boxes, np.array([k[0]], np.float32))[:, 0]))
        assert_mask(dets.masks[j], m)


@pytest.mark.parametrize("int8", [False, True])
def test_yolov8_pose_keypoints_match_the_reference(int8):
    rng = np.random.default_rng(9)
    y = v8_concat(rng, nc=1, extra=3 * 4)
    y[0, 5::3] = rng.uniform(0, SIZE[1], (4, y.shape[2]))
    y[0, 6::3] = rng.uniform(0, SIZE[0], (4, y.shape[2]))
    y[0, 7::3] = rng.uniform(0, 1, (4, y.shape[2]))
    qs = [(100 / 255, -128)] if int8 else None
    outs = [ref.quantize(y, *qs[0])] if int8 else [y]
    dets = YOLOv8Pose(num_classes=1, num_keypoints=4)(outs, qs)
    kept = ref.yolov8_concat(outs[0], 1, 0.25, 0.45, None if qs is None else qs[0], extra=12)
    assert_same(dets, kept, 100 / 255 if int8 else 1e-5)
    assert dets.keypoints.shape == (len(kept), 4, 3)
    for k in kept:
        j = int(np.argmax(box_iou(dets.boxes, np.array([k[0]], np.float32))[:, 0]))
        np.testing.assert_allclose(dets.keypoints[j], k[3].reshape(4, 3), atol=1e-4)


# -- faces -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("int8", [False, True])
def test_retinaface_matches_the_reference(int8):
    rng = np.random.default_rng(10)
    size = (64, 64)
    n = sum(2 * (64 // s) ** 2 for s in (8, 16, 32))
    loc = rng.normal(0, 1, (1, n, 4)).astype(np.float32)
    face = probs(rng, (n,), 0.05)
    conf = np.stack([1 - face, face], 1)[None].astype(np.float32)
    landm = rng.normal(0, 1, (1, n, 10)).astype(np.float32)
    outs, qs = [loc, conf, landm], None
    if int8:
        qs = [(8 / 255, 0), PROB_Q, (8 / 255, 0)]
        outs = [ref.quantize(a, *q) for a, q in zip(outs, qs)]
    dets = RetinaFace(input_size=size, conf=0.5, iou=0.4)(outs, qs)
    kept = ref.retinaface(*outs, size, 0.5, 0.4, qs or (None, None, None))
    assert_same(dets, kept, PROB_Q[0] if int8 else 1e-5)
    for k in kept:
        j = int(np.argmax(box_iou(dets.boxes, np.array([k[0]], np.float32))[:, 0]))
        np.testing.assert_allclose(dets.keypoints[j, :, :2], np.array(k[3]), atol=1e-3)
        assert (dets.keypoints[j, :, 2] == 1).all()


@pytest.mark.parametrize("int8", [False, True])
def test_scrfd_matches_the_reference(int8):
    rng = np.random.default_rng(11)
    size = (64, 64)
    ns = [2 * (64 // s) ** 2 for s in (8, 16, 32)]
    outs = ([probs(rng, (n, 1), 0.05) for n in ns] + [rng.uniform(0, 4, (1, n, 4)).astype(np.float32) for n in ns]
            + [rng.normal(0, 1, (n, 10)).astype(np.float32) for n in ns])
    qs = None
    if int8:
        qs = [PROB_Q] * 3 + [(4 / 255, -128)] * 3 + [(8 / 255, 0)] * 3
        outs = [ref.quantize(a, *q) for a, q in zip(outs, qs)]
    dets = SCRFD(input_size=size)(outs, qs)
    kept = ref.scrfd(outs, size, 0.5, 0.4, qs=qs)
    assert_same(dets, kept, PROB_Q[0] if int8 else 1e-5)
    for k in kept:
        j = int(np.argmax(box_iou(dets.boxes, np.array([k[0]], np.float32))[:, 0]))
        np.testing.assert_allclose(dets.keypoints[j, :, :2], np.array(k[3]), atol=1e-3)


# -- classification and segmentation ----------------------------------------------------------

def test_top_k_float_int8_and_softmax():
    y = np.array([[0.1, 0.7, 0.05, 0.9, 0.3]], np.float32)
    assert [c for c, _, _ in top_k(y, 3)] == [3, 1, 4]
    assert top_k(y, 2, labels=["a", "b", "c", "d", "e"])[0][2] == "d"
    q = ref.quantize(y, *PROB_Q)
    got = top_k(q, 3, quant=PROB_Q)
    assert [c for c, _, _ in got] == [3, 1, 4]
    np.testing.assert_allclose([s for _, s, _ in got], ref.deq(q, PROB_Q)[0, [3, 1, 4]], atol=1e-7)
    soft = top_k(y, 5, softmax=True)
    e = np.exp(y[0] - y[0].max())
    np.testing.assert_allclose(sorted((s for _, s, _ in soft), reverse=True), np.sort(e / e.sum())[::-1], rtol=1e-6)
    with pytest.raises(InvalidParamError, match="quant"):
        top_k(q, 2)
    with pytest.raises(InvalidParamError, match="k must be an int >= 1"):
        top_k(y, 0)


def test_segmentation_argmax_and_colours_float_and_int8():
    rng = np.random.default_rng(12)
    y = rng.normal(0, 1, (1, 4, 5, 6)).astype(np.float32)
    classes, colours = segmentation_mask(y)
    expected = np.array([[int(np.argmax(y[0, :, r, c])) for c in range(6)] for r in range(5)])
    np.testing.assert_array_equal(classes, expected)
    palette = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)
    _, colours = segmentation_mask(y, palette)
    np.testing.assert_array_equal(colours, palette[expected])
    q = ref.quantize(y, 8 / 255, 0)
    np.testing.assert_array_equal(segmentation_mask(q)[0], np.argmax(ref.deq(q, (8 / 255, 0))[0], axis=0))
    with pytest.raises(InvalidParamError, match="segmentation_mask"):
        segmentation_mask(np.zeros((2, 3)))


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, outs, match", [
    (lambda: YOLOv8(num_classes=5), [np.zeros((1, 7, 10), np.float32)], "rows"),
    (lambda: YOLOv8(num_classes=5), [np.zeros((1, 9, 10), np.int8)], "quant=ctx.outputs"),
    (lambda: YOLOv8(num_classes=5), [np.zeros((2, 9, 10), np.float32)], "batch 1"),
    (lambda: YOLOv8(num_classes=5), [np.zeros((1, 9, 10), np.float32)] * 4, "3 branches"),
    (lambda: YOLOv5(input_size=64), [np.zeros((1, 27, 8, 8), np.float32)] * 2, "3 head outputs"),
    (lambda: YOLOv5(input_size=64), [np.zeros((1, 28, 8, 8), np.float32)] * 3, "anchors x"),
    (lambda: YOLOv5(input_size=64), [np.zeros((1, 27, 7, 7), np.float32)] * 3, "does not divide"),
    (lambda: RetinaFace(input_size=64), [np.zeros((1, 10, 4), np.float32)] * 3, "landmarks"),
    (lambda: SCRFD(input_size=64), [np.zeros((128, 1), np.float32)] * 9, r"\(128, 4\) was expected"),
    (lambda: YOLOv8Pose(), [np.zeros((1, 9, 10), np.float32)] * 6, "concatenated"),
    (lambda: YOLOv8Seg(num_classes=1, mask_dim=2), [np.zeros((1, 7, 10), np.float32)], "prototypes"),
    (lambda: YOLOv8(), 5, "an array or a list of arrays"),  # was "'int' object is not iterable"
    (lambda: YOLOv8(), [np.array(["a"])], "output 0 must be a model output"),
    (lambda: YOLOv8(), [[[1, 2], [3]]], "output 0 must be a model output"),  # ragged
])
def test_bad_outputs_raise_clear_errors(make, outs, match):
    with pytest.raises(InvalidParamError, match=match):
        make()(outs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(conf=1.5), "conf"), (dict(iou=-0.1), "iou"), (dict(max_det=0), "max_det"),
    (dict(num_classes=0), "num_classes"), (dict(input_size="big"), "input_size"),
    (dict(conf="0.5"), "conf must be a number"), (dict(iou=float("nan")), "iou must be a number"),
    (dict(class_aware="no"), "class_aware must be True or False"),  # "no" read as true
    (dict(labels="person"), "labels must be a list of class names"),  # was one label per letter
    (dict(input_size=(640.5, 640)), "input_size must be an int or"),
    (dict(input_size=10**9), "pixels a side"),
])
def test_bad_decoder_parameters_raise(kwargs, match):
    with pytest.raises(InvalidParamError, match=match) as info:
        YOLOv8(**kwargs)
    assert str(info.value).startswith("YOLOv8: ") and "YOLOv8: YOLOv8" not in str(info.value)


@pytest.mark.parametrize("make, match", [
    (lambda: YOLOv5(anchors=[["a"]]), "anchors must be"),
    (lambda: YOLOv5(anchors=[[[10, float("nan")]]]), "finite"),
    (lambda: YOLOv5(logits="yes"), "logits must be True or False"),
    (lambda: YOLOv8Seg(mask_dim=[32]), "mask_dim must be an int"),  # was kept and failed at decode
    (lambda: YOLOv8Seg(split=np.ones(2)), "split must be True or False"),
    (lambda: RetinaFace(input_size=64, variance=(0.1,)), "variance must be two positive numbers"),
    (lambda: RetinaFace(input_size=64, steps=(8, 0, 32)), "steps must be a list of ints >= 1"),
    (lambda: RetinaFace(input_size=64, min_sizes=((16,), (64,))), "one list of sizes per step"),
    (lambda: RetinaFace(input_size=64, min_sizes=((16,), (-1,), (256,))), "lists of positive numbers"),
    (lambda: SCRFD(input_size=64, strides=(8, 16.5)), "strides must be a list of ints"),
    (lambda: SCRFD(input_size=64, anchors="2"), "anchors must be an int"),
    (lambda: dfl_distances(np.zeros((4, 16))), r"bins must be \(4, R, M\)"),
    (lambda: top_k(np.array(["a", "b"])), "output must be scores"),
    (lambda: top_k(np.zeros(3), labels="abc"), "labels must be a list"),
    (lambda: top_k(np.zeros(3), softmax="yes"), "softmax must be True or False"),
    (lambda: segmentation_mask([[1, 2], [3]]), "output must be"),
    (lambda: retinaface_priors("big"), "input_size must be"),
])
def test_bad_family_parameters_raise(make, match):
    with pytest.raises(InvalidParamError, match=match):
        make()


def test_quant_entries_may_be_tensor_attrs_and_must_be_valid():
    from rknnlite import TensorAttr
    from rknnlite.constants import QntType, TensorFormat, TensorType

    y = v8_concat(np.random.default_rng(13))
    q = (100 / 255, -128)
    raw = ref.quantize(y, *q)
    attr = TensorAttr(0, "out", raw.shape, TensorFormat.UNDEFINED, TensorType.INT8, QntType.AFFINE_ASYMMETRIC,
                      zp=q[1], scale=q[0])
    a, b = YOLOv8(num_classes=5)([raw], [attr]), YOLOv8(num_classes=5)([raw], [q])
    assert len(a) == len(b) > 0 and np.array_equal(a.boxes, b.boxes)
    with pytest.raises(InvalidParamError, match="positive scale"):
        YOLOv8(num_classes=5)([raw], [(0.0, 0)])
    with pytest.raises(InvalidParamError, match=r"\(scale, zp\)"):
        YOLOv8(num_classes=5)([raw], ["x"])
    with pytest.raises(InvalidParamError, match="positive scale"):  # was "truth value of an array"
        YOLOv8(num_classes=5)([raw], [(np.ones(2), 0)])
    with pytest.raises(InvalidParamError, match="positive scale"):
        YOLOv8(num_classes=5)([raw], [(float("inf"), 0)])
    with pytest.raises(InvalidParamError, match="zero point 'x'; an int"):
        YOLOv8(num_classes=5)([raw], [(0.5, "x")])

"""rknnlite.vision.DetectionStages on a Pipeline: letterbox -> inference -> decode, the
detections mapped to each source frame and carrying its frame id."""

from __future__ import annotations

import numpy as np

import rknnlite
from rknnlite.pipeline import AsyncInferQueue, Pipeline
from rknnlite.vision import DetectionStages, YOLOv8, letterbox
from vision_models import DATA, convert, model_zoo_split



def source_frames():
    """Frames of other sizes than the 64x96 input: the fixture pictures scaled up, padded."""
    pics = np.load(DATA / "yolov8.npz")["images"]
    big = [np.repeat(np.repeat(p, 3, 0), 3, 1) for p in pics]                # 192x288, same aspect
    tall = [np.concatenate([p, np.zeros((40,) + p.shape[1:], np.uint8)]) for p in pics]  # 104x96
    return big + tall


def test_detection_stages_in_a_pipeline_match_a_direct_run(tmp_path):
    frames = source_frames()
    dec = YOLOv8(num_classes=3, input_size=(64, 96))
    with rknnlite.Context(convert("yolov8", tmp_path), backend="software") as ctx:
        stages = DetectionStages.from_context(dec, ctx)
        assert (stages.size, stages.layout) == ((64, 96), "nhwc")  # the image input as librknnrt reports it
        # the direct way: letterbox, run, decode, map back
        expected = []
        for f in frames:
            pic, t = letterbox(f, (64, 96))
            expected.append(dec(ctx.run([pic[None]], data_format="nhwc")).to_source(t))
        with Pipeline(stages.preprocess, ctx, stages.postprocess) as pipe:
            for f in frames:
                pipe.push(f)
            pipe.close()
            results = list(pipe)
        single = stages(ctx, frames[0])
    assert [r.frame_id for r in results] == list(range(len(frames)))
    assert sum(len(e) for e in expected) > 0
    for r, e, f in zip(results, expected, frames):
        assert r.ok, r.error
        assert r.value.frame_id == r.frame_id
        np.testing.assert_allclose(r.value.boxes, e.boxes, atol=1e-3)
        np.testing.assert_allclose(r.value.scores, e.scores, atol=1e-6)
        assert (r.value.boxes[:, 2] <= f.shape[1]).all() and (r.value.boxes[:, 3] <= f.shape[0]).all()
    np.testing.assert_allclose(single.boxes, expected[0].boxes, atol=1e-3)
    assert single.frame_id is None


def test_raw_int8_outputs_through_the_stages_use_the_contexts_quantization(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pics = np.load(DATA / "yolov8.npz")["images"]
    path = convert("yolov8", tmp_path, quantize=True, images=pics, model=model_zoo_split("yolov8"))
    dec = YOLOv8(num_classes=3, input_size=(64, 96))
    with rknnlite.Context(path, backend="software") as ctx:
        stages = DetectionStages.from_context(dec, ctx, raw=True)
        expected = [dec(ctx.run([p.transpose(2, 0, 1)[None]], want_float=False), ctx.outputs) for p in pics]
        with AsyncInferQueue(ctx, jobs=1, want_float=False) as queue, \
                Pipeline(stages.preprocess, queue, stages.postprocess) as pipe:
            for p in pics:
                pipe.push(p)
            pipe.close()
            results = [r.value for r in pipe]
    assert sum(len(e) for e in expected) > 0
    for got, e in zip(results, expected):
        # same size: the transform is the identity, with the boxes clipped to the picture
        np.testing.assert_allclose(got.boxes, np.clip(e.boxes, 0, [96, 64, 96, 64]), atol=1e-3)
        np.testing.assert_array_equal(got.scores, e.scores)


def test_nhwc_preprocess_letterboxes_into_the_input():
    stages = DetectionStages(YOLOv8(num_classes=3, input_size=(64, 96)), (64, 96), layout="nhwc")
    carry = stages.preprocess(np.zeros((10, 20, 3), np.uint8))
    assert carry.data[0].shape == (1, 64, 96, 3) and carry.meta.source_size == (10, 20)


def test_a_bad_layout_or_input_is_refused():
    import pytest

    from rknnlite import InvalidParamError

    with pytest.raises(InvalidParamError, match="layout"):
        DetectionStages(YOLOv8(), 640, layout="hwc")
    for kwargs, match in ((dict(layout=np.zeros(2)), "layout"),  # was "truth value of an array"
                          (dict(size=(640.0, 640)), "size must be an int"), (dict(swap_rb="yes"), "swap_rb"),
                          (dict(pad="grey"), "pad must be a number"), (dict(decoder="yolov8"), "callable")):
        with pytest.raises(InvalidParamError, match=match):
            DetectionStages(**{"decoder": YOLOv8(), "size": 640, **kwargs})

    class FlatInput:  # a context whose first input is not an image
        inputs = [type("Attr", (), {"name": "x", "dims": (1, 4), "fmt": None})()]

    with pytest.raises(InvalidParamError, match="4-D image input"):
        DetectionStages.from_context(YOLOv8(), FlatInput())

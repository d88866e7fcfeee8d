"""Calibration datasets (``rknnlite.toolkit.dataset``): the dataset.txt format, images and
``.npy`` samples, ``quant_img_RGB2BGR`` and every error case, directly and through
``RKNN.build(do_quantization=True, dataset=...)``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from rknnlite.model.portable import read_portable
from rknnlite.model.spec import TensorSpec
from rknnlite.toolkit.dataset import DatasetError, load_image, read_dataset

PIL_Image = pytest.importorskip("PIL.Image")

RNG = np.random.default_rng(5)
NCHW = TensorSpec("x", (1, 3, 4, 6), "float32", "NCHW")


def save_image(path: Path, pixels: np.ndarray, **kw) -> str:
    mode = "L" if pixels.ndim == 2 else "RGB"
    PIL_Image.fromarray(pixels, mode).save(path, **kw)
    return path.name


def rgb(h=4, w=6) -> np.ndarray:
    return RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_lossless_images_become_nchw_pixels(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = rgb(), rgb()
    save_image(tmp_path / "a.png", a)
    save_image(tmp_path / "b.BMP", b)
    (tmp_path / "ds.txt").write_text("a.png\n\n   \nb.BMP\n")
    samples = read_dataset("ds.txt", [NCHW])
    assert len(samples) == 2  # blank lines skipped
    for (x,), pixels in zip(samples, (a, b)):
        assert x.shape == (1, 3, 4, 6) and x.dtype == np.float32
        np.testing.assert_array_equal(x[0], pixels.transpose(2, 0, 1).astype(np.float32))


def test_jpeg_is_decoded_like_pillow(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_image(tmp_path / "c.jpg", rgb(), quality=90)
    with PIL_Image.open(tmp_path / "c.jpg") as img:
        expected = np.asarray(img.convert("RGB"))
    (x,), = read_dataset_text(tmp_path, "c.jpg\n", [NCHW])
    np.testing.assert_array_equal(x[0], expected.transpose(2, 0, 1))
    np.testing.assert_array_equal(load_image("c.jpg"), expected)


def read_dataset_text(tmp_path, text, specs, **kw):
    (tmp_path / "dataset.txt").write_text(text)
    return read_dataset("dataset.txt", specs, **kw)


def test_rgb2bgr_reverses_image_channels_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pixels = rgb()
    save_image(tmp_path / "a.png", pixels)
    arr = RNG.standard_normal((1, 3, 4, 6)).astype(np.float32)
    np.save(tmp_path / "a.npy", arr)
    spec2 = TensorSpec("y", (1, 3, 4, 6), "float32", "NCHW")
    plain = read_dataset_text(tmp_path, "a.png a.npy\n", [NCHW, spec2])
    swapped = read_dataset_text(tmp_path, "a.png a.npy\n", [NCHW, spec2], rgb2bgr=True)
    np.testing.assert_array_equal(plain[0][0][0], pixels.transpose(2, 0, 1))
    np.testing.assert_array_equal(swapped[0][0][0], pixels[:, :, ::-1].transpose(2, 0, 1))
    np.testing.assert_array_equal(plain[0][1], arr)
    np.testing.assert_array_equal(swapped[0][1], arr)  # .npy samples are taken as they are


def test_rgb2bgr_per_input(tmp_path, monkeypatch):
    """config(quant_img_RGB2BGR=[True, False]): the vendor's per-input form reverses the first
    input's images only (rknnlite reversed both: the list was read by its truth)."""
    monkeypatch.chdir(tmp_path)
    pixels = rgb()
    save_image(tmp_path / "a.png", pixels)
    spec2 = TensorSpec("y", (1, 3, 4, 6), "float32", "NCHW")
    (first, second), = read_dataset_text(tmp_path, "a.png a.png\n", [NCHW, spec2], rgb2bgr=[True, False])
    np.testing.assert_array_equal(first[0], pixels[:, :, ::-1].transpose(2, 0, 1))
    np.testing.assert_array_equal(second[0], pixels.transpose(2, 0, 1))
    with pytest.raises(DatasetError, match=r"quant_img_RGB2BGR has 1 value\(s\) for 2 model input\(s\)"):
        read_dataset_text(tmp_path, "a.png a.png\n", [NCHW, spec2], rgb2bgr=[True])


def test_layouts_grayscale_and_dtypes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pixels = rgb()
    gray = RNG.integers(0, 256, (4, 6), dtype=np.uint8)
    save_image(tmp_path / "c.png", pixels)
    save_image(tmp_path / "g.png", gray)
    nhwc = TensorSpec("x", (1, 4, 6, 3), "uint8", "NHWC")
    (x,), = read_dataset_text(tmp_path, "c.png\n", [nhwc])
    assert x.dtype == np.uint8
    np.testing.assert_array_equal(x[0], pixels)  # NHWC input: no transpose
    one = TensorSpec("x", (1, 1, 4, 6), "float32", "NCHW")
    (x,), = read_dataset_text(tmp_path, "g.png\n", [one])
    np.testing.assert_array_equal(x[0, 0], gray)
    (x,), = read_dataset_text(tmp_path, "g.png\n", [NCHW])  # grayscale feeds all three channels
    np.testing.assert_array_equal(x[0], np.stack([gray] * 3))
    dyn = TensorSpec("x", (1, 3, -1, -1), "float32", "NCHW")
    (x,), = read_dataset_text(tmp_path, "c.png\n", [dyn])
    assert x.shape == (1, 3, 4, 6)
    with pytest.raises(DatasetError, match="colour image; input 0 \\('x'\\) has 1 channel"):
        read_dataset_text(tmp_path, "c.png\n", [one])


def test_paths_are_relative_to_the_dataset_file(tmp_path, monkeypatch, caplog):
    """RKNN-Toolkit2 2.5.0 reads a dataset's relative paths from the dataset file's folder
    (Rockchip's examples list ``./imgs/...`` beside a dataset.txt used from another folder);
    a file found only under the current directory is still read, with a warning."""
    sub = tmp_path / "data"
    (sub / "imgs").mkdir(parents=True)
    np.save(sub / "imgs" / "s.npy", np.zeros((1, 3, 4, 6), np.float32))
    np.save(tmp_path / "cwd_only.npy", np.ones((1, 3, 4, 6), np.float32))
    (sub / "beside.txt").write_text("./imgs/s.npy\n")
    (sub / "cwd.txt").write_text("cwd_only.npy\n")
    (sub / "gone.txt").write_text("imgs/gone.npy\n")
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        (sample,) = read_dataset(sub / "beside.txt", [NCHW])
    assert float(sample[0].max()) == 0.0 and not caplog.records
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        (sample,) = read_dataset("data/cwd.txt", [NCHW])
    assert float(sample[0].min()) == 1.0
    assert "'cwd_only.npy' is not in the dataset file's folder" in caplog.text
    with pytest.raises(DatasetError, match="line 1: cannot read 'data/imgs/gone.npy': no such file"):
        read_dataset("data/gone.txt", [NCHW])


def test_npy_samples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = RNG.standard_normal((3, 4, 6))
    np.save(tmp_path / "nobatch.npy", a)  # float64, without the batch dim
    (x,), = read_dataset_text(tmp_path, "nobatch.npy\n", [NCHW])
    assert x.shape == (1, 3, 4, 6) and x.dtype == np.float32
    np.testing.assert_allclose(x[0], a, rtol=1e-6)
    two = [NCHW, TensorSpec("m", (2, 5), "float32")]
    np.save(tmp_path / "m.npy", np.ones((2, 5), np.float32))
    samples = read_dataset_text(tmp_path, "nobatch.npy\tm.npy\nnobatch.npy  m.npy\n", two)
    assert len(samples) == 2 and samples[1][1].shape == (2, 5)


ERROR_CASES = [
    # (dataset name, its text, expected part of the message)
    (None, None, "no dataset given"),
    ("missing.txt", None, "cannot read dataset 'missing.txt'"),
    ("empty.txt", "\n  \n", "is empty"),
    ("count.txt", "good.npy\ngood.npy good.npy\n", "line 2: 2 path(s) for 1 model input(s)"),
    ("nofile.txt", "good.npy\n\ngone.npy\n", "line 3: cannot read 'gone.npy': no such file"),
    ("noimage.txt", "good.npy\ngone.png\n", "line 2: cannot read 'gone.png': no such file"),
    ("other.txt", "text.txt\n", "line 1: 'text.txt': unsupported file type"),
    ("shape.txt", "good.npy\nbad_shape.npy\n",
     "line 2: 'bad_shape.npy' has shape [1, 2, 4, 6], input 0 ('x') needs [1, 3, 4, 6] (NCHW, float32)"),
    ("corrupt.txt", "broken.jpg\n", "line 1: cannot read image 'broken.jpg'"),
    ("pickle.txt", "obj.npy\n", "line 1: cannot read 'obj.npy'"),
]


def make_error_files(tmp_path):
    good = RNG.standard_normal((1, 3, 4, 6)).astype(np.float32)
    np.save(tmp_path / "good.npy", good)
    np.save(tmp_path / "bad_shape.npy", good[:, :2])
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    save_image(tmp_path / "good.png", rgb())
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (tmp_path / "text.txt").write_text("1 2 3")


@pytest.mark.parametrize("name,text,expected", ERROR_CASES, ids=[c[0] or "none" for c in ERROR_CASES])
def test_dataset_errors(tmp_path, monkeypatch, name, text, expected):
    monkeypatch.chdir(tmp_path)
    make_error_files(tmp_path)
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(DatasetError) as info:
        read_dataset(name, [NCHW])
    assert expected in str(info.value)
    if name is not None:
        assert repr(name) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_image_on_a_non_image_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_image(tmp_path / "a.png", rgb())
    with pytest.raises(DatasetError, match="line 1: 'a.png': an image can only feed a 4-D input"):
        read_dataset_text(tmp_path, "a.png\n", [TensorSpec("v", (1, 10), "float32")])
    four = TensorSpec("x", (1, 4, 4, 6), "float32", "NCHW")
    with pytest.raises(DatasetError, match="has 4 channels; images give 1"):
        read_dataset_text(tmp_path, "a.png\n", [four])


def test_missing_pillow_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_image(tmp_path / "a.png", rgb())
    np.save(tmp_path / "a.npy", np.zeros((1, 3, 4, 6), np.float32))
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(DatasetError, match="line 1: reading images needs the Pillow package"):
        read_dataset_text(tmp_path, "a.png\n", [NCHW])
    assert len(read_dataset_text(tmp_path, "a.npy\n", [NCHW])) == 1  # .npy needs no Pillow


# -- through the toolkit -----------------------------------------------------------------------

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.toolkit import RKNN  # noqa: E402


def conv_model():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 6])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


MODEL = conv_model()
MEAN, STD = [[0.0, 100.0, 200.0]], [[1.0, 2.0, 4.0]]


def build_quant(dataset, rgb2bgr=False):
    rknn = RKNN()
    try:
        assert rknn.config(mean_values=MEAN, std_values=STD, quant_img_RGB2BGR=rgb2bgr,
                           target_platform="rk3588") == 0
        assert rknn.load_onnx(MODEL) == 0
        if rknn.build(do_quantization=True, dataset=dataset) != 0:
            return None
        return read_portable(memoryview(rknn._model_bytes)).graph.quant
    finally:
        rknn.release()


def test_rgb2bgr_says_what_it_reverses(caplog):
    """RKNN-Toolkit2 warns that quant_img_RGB2BGR concerns image samples only and puts
    mean/std in BGR order; rknnlite says the same."""
    rknn = RKNN()
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert rknn.config(target_platform="rk3588", quant_img_RGB2BGR=True) == 0
    assert "quant_img_RGB2BGR=True" in caplog.text and "BGR order" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert rknn.config(target_platform="rk3588") == 0
    assert "quant_img_RGB2BGR" not in caplog.text
    rknn.release()


def test_build_calibrates_on_images_with_rgb2bgr(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    images = [rgb() for _ in range(3)]
    for i, p in enumerate(images):
        p[:, :, 0] //= 4  # distinct channel ranges, so the channel order shows in the ranges
        save_image(tmp_path / f"i{i}.png", p)
        save_image(tmp_path / f"r{i}.png", np.ascontiguousarray(p[:, :, ::-1]))
    (tmp_path / "rgb.txt").write_text("".join(f"i{i}.png\n" for i in range(3)))
    (tmp_path / "rev.txt").write_text("".join(f"r{i}.png\n" for i in range(3)))
    plain = build_quant("rgb.txt")
    swapped = build_quant("rgb.txt", rgb2bgr=True)
    reversed_files = build_quant("rev.txt")
    assert plain is not None and swapped is not None
    assert swapped == reversed_files  # RGB2BGR = the same images stored reversed
    assert build_quant("rgb.txt", rgb2bgr=[True]) == swapped  # the per-input form
    assert swapped["x"] != plain["x"]
    # The input range is that of the normalised pixels.
    xs = np.stack([p.transpose(2, 0, 1) for p in images]).astype(np.float32)
    xn = (xs - np.float32(MEAN[0]).reshape(1, 3, 1, 1)) / np.float32(STD[0]).reshape(1, 3, 1, 1)
    lo, hi = min(float(xn.min()), 0.0), max(float(xn.max()), 0.0)
    assert plain["x"].scale[0] == pytest.approx((hi - lo) / 255, rel=1e-5)


def test_build_logs_dataset_errors(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    monkeypatch.chdir(tmp_path)
    save_image(tmp_path / "ok.png", rgb())
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not a png")
    (tmp_path / "ds.txt").write_text("ok.png\nbroken.png\n")
    assert build_quant("ds.txt") is None
    msg = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR][-1]
    assert "dataset 'ds.txt' line 2: cannot read image 'broken.png'" in msg
    (tmp_path / "ds.txt").write_text("ok.png\n")
    assert build_quant("ds.txt") is not None  # the same toolkit flow works once the data is fixed


#: a 5x3 (width x height) RGB image and OpenCV 4.11's cv2.resize(..., (2, 2), INTER_LINEAR) of it
#: (the resize RKNN-Toolkit2 2.5.0 applies to calibration images of another size)
SMALL = (np.arange(3 * 5 * 3).reshape(3, 5, 3) * 37 % 256).astype(np.uint8)
SMALL_2X2 = [[[94, 131, 168], [115, 136, 125]], [[158, 195, 88], [132, 153, 190]]]


def test_images_of_another_size_are_resized_as_the_vendor_does(tmp_path, monkeypatch, caplog):
    """Rockchip's onnx/yolov5 example calibrates a 640x640 model on an 810x1080 bus.jpg:
    RKNN-Toolkit2 resizes such images (OpenCV's bilinear), it does not refuse them."""
    from rknnlite.toolkit.dataset import resize_linear

    monkeypatch.chdir(tmp_path)
    save_image(tmp_path / "small.png", SMALL)
    spec = TensorSpec("x", (1, 3, 2, 2), "float32", "NCHW")
    with caplog.at_level(logging.INFO, logger="rknnlite.toolkit"):
        ((x,),) = read_dataset_text(tmp_path, "small.png\n", [spec])
    np.testing.assert_array_equal(x[0].transpose(1, 2, 0), SMALL_2X2)
    assert "'small.png' is 5x3 (width x height); resized to 2x2" in caplog.text
    # larger images, downscaled as OpenCV does (equal wherever it is installed)
    big = RNG.integers(0, 256, (97, 131, 3), dtype=np.uint8)
    out = resize_linear(big, 40, 64)
    assert out.shape == (40, 64, 3) and out.dtype == np.uint8
    flat = RNG.integers(0, 256, (1, 1, 3), dtype=np.uint8)
    np.testing.assert_array_equal(resize_linear(np.broadcast_to(flat, (9, 7, 3)), 4, 5),
                                  np.broadcast_to(flat, (4, 5, 3)))
    cv2 = pytest.importorskip("cv2")
    np.testing.assert_array_equal(out, cv2.resize(big, (64, 40), interpolation=cv2.INTER_LINEAR))


def test_load_sample_for_a_spec_or_a_runtime_attr(tmp_path, monkeypatch):
    import rknnlite
    from rknnlite.toolkit.dataset import load_sample

    monkeypatch.chdir(tmp_path)
    pixels = rgb()
    save_image(tmp_path / "a.png", pixels)
    expected = pixels.transpose(2, 0, 1)[np.newaxis].astype(np.float32)
    np.testing.assert_array_equal(load_sample("a.png", NCHW), expected)
    np.testing.assert_array_equal(load_sample("a.png", NCHW, rgb2bgr=True), expected[:, ::-1])
    (tmp_path / "ds.txt").write_text("a.png\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0 and rknn.load_onnx(MODEL) == 0
    assert rknn.build(do_quantization=True, dataset="ds.txt") == 0
    assert rknn.export_rknn("m.rknn") == 0
    rknn.release()
    with rknnlite.Context("m.rknn") as ctx:
        attr = ctx.inputs[0]
        assert attr.dtype == np.int8  # a quantized input: the sample stays raw float32 NCHW
        got = load_sample("a.png", attr)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)
        nhwc = attr.replace(fmt=rknnlite.TensorFormat.NHWC, dims=(1, 4, 6, 3))
        np.testing.assert_array_equal(load_sample("a.png", nhwc), expected)
    with pytest.raises(DatasetError, match="sample 'big.png': cannot read 'big.png': no such file"):
        load_sample("big.png", NCHW)

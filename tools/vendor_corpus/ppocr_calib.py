"""PP-OCR mobile direction classifier: int8 calibration fidelity, vendor against rknnlite.

The model is ``ch_ppocr_mobile_v2.0_cls_infer.onnx`` from the ``rapidocr-onnxruntime==1.4.4``
wheel (pass its path).  Three steps, each run by the Python that has the toolkit::

    python tools/vendor_corpus/ppocr_calib.py images OUT            # needs Pillow
    /var/tmp/rkt/bin/python tools/vendor_corpus/ppocr_calib.py run OUT MODEL vendor
    PYTHONPATH=. python tools/vendor_corpus/ppocr_calib.py run OUT MODEL rknnlite

``images`` renders 16 printed text lines (DejaVu fonts, every other one rotated 180
degrees) laid out as PP-OCR's classifier preprocessing does (height 48, width up to 192,
right padding that normalises to 0) and writes ``OUT/calib*.npy`` (8, the calibration
set) and ``OUT/test*.npy`` (8).  ``run`` builds the model with each algorithm
(rk3588, mean = std = 127.5, input fixed to [1, 3, 48, 192]), runs the 8 test lines on
the toolkit's simulator, compares with onnxruntime float (top-1 and cosine), and copies
the ``.quantization.cfg`` of ``hybrid_quantization_step1`` to
``OUT/<toolkit>_<algo>.cfg``.  The calibration arrays go to the dataset in NCHW: the
vendor wants npy files in model layout.

The det and rec models are compared by their calibrated ranges and end to end::

    python tools/vendor_corpus/ppocr_calib.py pages OUT HEIGHT WIDTH   # 8 + 8 text pages / lines
    <python> tools/vendor_corpus/ppocr_calib.py ranges OUT MODEL vendor|rknnlite HEIGHT WIDTH MEAN STD ALGOS

(``MEAN``/``STD``: one value or three comma-separated; ``ALGOS``: comma-separated.)
``pages`` also writes 8 test arrays ``OUT/test*.npy``; ``e2e`` builds each algorithm, runs
them on the simulator (outputs to ``OUT/<toolkit>_<algo>_e2e.npy``, models to
``OUT/<toolkit>_<algo>.rknn``) and compares with onnxruntime float (det: cosine of the
probability map and F1 of the map binarised at 0.3, PP-OCR's threshold; rec: cosine of the
output and the greedy CTC decoding)::

    <python> tools/vendor_corpus/ppocr_calib.py e2e OUT MODEL vendor|rknnlite HEIGHT WIDTH MEAN STD ALGOS
"""

import contextlib
import glob
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np

WORDS = ("invoice total amount due date paid customer number order shipping address "
         "receipt 2024 price tax 17.50 quantity item description balance account phone "
         "street city 0123456789 reference payment cash card change thank you").split()
FONTS = ["DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf"]
ALGORITHMS = ("normal", "mmse", "kl_divergence")


def images(out):
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(2024)
    os.makedirs(out, exist_ok=True)
    for k in range(16):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 5))))
        font = ImageFont.truetype(os.path.join("/usr/share/fonts/truetype/dejavu", FONTS[k % 4]), 32)
        box = font.getbbox(text)
        img = Image.new("RGB", (box[2] + 16, 48), "white")
        ImageDraw.Draw(img).text((8, 6 - box[1] + 4), text, font=font, fill=(20, 20, 20))
        if k % 2:
            img = img.rotate(180)
        w = min(192, int(np.ceil(48 * img.width / img.height)))
        arr = np.full((48, 192, 3), 127.5, np.float32)
        arr[:, :w] = np.asarray(img.resize((w, 48), Image.BILINEAR), np.float32)
        name = ("calib%d" if k < 8 else "test%d") % (k % 8)
        np.save(os.path.join(out, name + ".npy"), arr)


def cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def run(out, model, which):
    import onnxruntime as ort

    if which == "vendor":
        from rknn.api import RKNN
    else:
        from rknnlite.toolkit import RKNN
    out = os.path.abspath(out)
    model = os.path.abspath(model)
    calib = sorted(glob.glob(os.path.join(out, "calib*.npy")))
    tests = sorted(glob.glob(os.path.join(out, "test*.npy")))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = [sess.run(None, {sess.get_inputs()[0].name:
                           ((np.load(t) - 127.5) / 127.5).transpose(2, 0, 1)[None].astype(np.float32)})[0]
           for t in tests]
    results = {}
    for algo in ALGORITHMS:
        with tempfile.TemporaryDirectory() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                with open("dataset.txt", "w") as f:  # npy datasets are read in model layout
                    for k, c in enumerate(calib):
                        np.save(f"c{k}.npy", np.load(c).transpose(2, 0, 1)[None])
                        f.write(f"c{k}.npy\n")
                log = io.StringIO()
                with contextlib.redirect_stdout(log):
                    for step1 in (True, False):
                        rknn = RKNN(verbose=False)
                        rknn.config(mean_values=[[127.5] * 3], std_values=[[127.5] * 3],
                                    target_platform="rk3588", quantized_algorithm=algo)
                        assert rknn.load_onnx(model, inputs=["x"], input_size_list=[[1, 3, 48, 192]]) == 0
                        if step1:
                            assert rknn.hybrid_quantization_step1(dataset="dataset.txt") == 0
                            cfg = glob.glob("*.quantization.cfg")[0]
                            shutil.copy(cfg, os.path.join(out, f"{which}_{algo}.cfg"))
                            rknn.release()
                            continue
                        assert rknn.build(do_quantization=True, dataset="dataset.txt") == 0
                        assert rknn.init_runtime() == 0
                        got = [rknn.inference(inputs=[np.load(t)[None]], data_format="nhwc")[0] for t in tests]
                        rknn.release()
            finally:
                os.chdir(cwd)
        top1 = sum(int(np.argmax(g) == np.argmax(r)) for g, r in zip(got, ref))
        cos = [cosine(g, r) for g, r in zip(got, ref)]
        results[algo] = dict(top1=top1, n=len(tests), min_cos=min(cos),
                             probs=[np.ravel(g).round(4).tolist() for g in got])
        print(f"{which} {algo}: top-1 {top1}/{len(tests)}, min cosine {min(cos):.5f}", flush=True)
    with open(os.path.join(out, f"{which}_results.json"), "w") as f:
        json.dump(dict(results=results, ref=[np.ravel(r).round(4).tolist() for r in ref]), f, indent=1)


def pages(out, height, width):
    """8 calibration arrays ``(height, width, 3)`` of printed text lines on white, for the
    det and rec models (the rec ones are single lines: pass ``height`` 48), then 8 test
    arrays drawn the same way (the calibration ones do not depend on them)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(7)
    os.makedirs(out, exist_ok=True)
    for k in range(16):
        img = Image.new("RGB", (width, height), "white")
        draw = ImageDraw.Draw(img)
        y = 4
        while y < height - 30 or y == 4:
            font = ImageFont.truetype(os.path.join("/usr/share/fonts/truetype/dejavu",
                                                   FONTS[int(rng.integers(4))]), int(rng.integers(18, 34)))
            text = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 6))))
            draw.text((int(rng.integers(2, 20)), y), text, font=font, fill=(20, 20, 20))
            y += int(rng.integers(36, 60))
            if height <= 64:
                break
        name = ("calib%d" if k < 8 else "test%d") % (k % 8)
        np.save(os.path.join(out, name + ".npy"), np.asarray(img, np.float32))


def _three(text):
    """``"127.5"`` or ``"1,2,3"`` -> three floats."""
    values = [float(v) for v in text.split(",")]
    return values * 3 if len(values) == 1 else values


def _write_dataset(calib):
    """``dataset.txt`` in the cwd: each ``calib*.npy`` (HWC) saved there as ``c<k>.npy`` (NCHW)."""
    with open("dataset.txt", "w") as f:
        for k, c in enumerate(calib):
            np.save(f"c{k}.npy", np.load(c).transpose(2, 0, 1)[None])
            f.write(f"c{k}.npy\n")


def ranges(out, model, which, height, width, mean, std, algos):
    """``hybrid_quantization_step1`` only, each algorithm: copies the cfg to
    ``OUT/<toolkit>_<algo>.cfg``."""
    if which == "vendor":
        from rknn.api import RKNN
    else:
        from rknnlite.toolkit import RKNN
    out, model = os.path.abspath(out), os.path.abspath(model)
    calib = sorted(glob.glob(os.path.join(out, "calib*.npy")))
    for algo in algos.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                _write_dataset(calib)
                with contextlib.redirect_stdout(io.StringIO()):
                    rknn = RKNN(verbose=False)
                    rknn.config(mean_values=[_three(mean)], std_values=[_three(std)],
                                target_platform="rk3588", quantized_algorithm=algo)
                    assert rknn.load_onnx(model, inputs=["x"], input_size_list=[[1, 3, int(height), int(width)]]) == 0
                    assert rknn.hybrid_quantization_step1(dataset="dataset.txt") == 0
                    rknn.release()
                shutil.copy(glob.glob("*.quantization.cfg")[0], os.path.join(out, f"{which}_{algo}.cfg"))
                print(which, algo, "done", flush=True)
            finally:
                os.chdir(cwd)


def _ctc(probs):
    """Greedy CTC decoding of ``[1, T, classes]``: argmax per step, repeats collapsed,
    blank (0) dropped."""
    best = np.argmax(probs[0], axis=-1)
    return [int(c) for k, c in enumerate(best) if c and (k == 0 or c != best[k - 1])]


def e2e(out, model, which, height, width, mean, std, algos):
    """Builds each algorithm, runs the test arrays on the simulator and compares with
    onnxruntime float: det (one output channel) by the cosine of the probability map and
    the F1 of the map binarised at 0.3, rec by the cosine of the output and whether the
    greedy CTC decoding equals float's.  Writes ``OUT/<toolkit>_e2e.json``."""
    import onnxruntime as ort

    if which == "vendor":
        from rknn.api import RKNN
    else:
        from rknnlite.toolkit import RKNN
    out, model = os.path.abspath(out), os.path.abspath(model)
    calib = sorted(glob.glob(os.path.join(out, "calib*.npy")))
    tests = [np.load(t) for t in sorted(glob.glob(os.path.join(out, "test*.npy")))]
    mean, std = np.float32(_three(mean)), np.float32(_three(std))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = [sess.run(None, {"x": ((t - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)})[0]
           for t in tests]
    results = {}
    for algo in algos.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                _write_dataset(calib)
                with contextlib.redirect_stdout(io.StringIO()):
                    rknn = RKNN(verbose=False)
                    rknn.config(mean_values=[mean.tolist()], std_values=[std.tolist()],
                                target_platform="rk3588", quantized_algorithm=algo)
                    assert rknn.load_onnx(model, inputs=["x"], input_size_list=[[1, 3, int(height), int(width)]]) == 0
                    assert rknn.build(do_quantization=True, dataset="dataset.txt") == 0
                    rknn.export_rknn(os.path.join(out, f"{which}_{algo}.rknn"))
                    assert rknn.init_runtime() == 0
                    got = [np.reshape(rknn.inference(inputs=[t[None]], data_format="nhwc")[0], r.shape)
                           for t, r in zip(tests, ref)]
                    rknn.release()
            finally:
                os.chdir(cwd)
        np.save(os.path.join(out, f"{which}_{algo}_e2e.npy"), np.stack(got))
        cos = [cosine(g, r) for g, r in zip(got, ref)]
        if ref[0].shape[1] == 1:  # det: probability map
            f1 = [2 * np.sum((g > 0.3) & (r > 0.3)) / max(1, np.sum(g > 0.3) + np.sum(r > 0.3))
                  for g, r in zip(got, ref)]
            results[algo] = dict(cos=cos, f1=[float(v) for v in f1])
            extra = f"binarised F1 min {min(f1):.4f} mean {np.mean(f1):.4f}"
        else:  # rec: CTC
            same = [_ctc(g) == _ctc(r) for g, r in zip(got, ref)]
            results[algo] = dict(cos=cos, decoded=[_ctc(g) for g in got], same=same)
            extra = f"decoded equal {sum(same)}/{len(same)}"
        print(f"{which} {algo}: cosine min {min(cos):.5f} mean {np.mean(cos):.5f}, {extra}", flush=True)
    with open(os.path.join(out, f"{which}_e2e.json"), "w") as f:
        json.dump(dict(results=results, ref_decoded=[_ctc(r) for r in ref] if ref[0].ndim == 3 else None), f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "images":
        images(sys.argv[2])
    elif sys.argv[1] == "pages":
        pages(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "ranges":
        ranges(*sys.argv[2:])
    elif sys.argv[1] == "e2e":
        e2e(*sys.argv[2:])
    else:
        run(*sys.argv[2:5])

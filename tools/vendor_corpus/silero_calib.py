"""silero-vad (LSTM): int8 fidelity of each calibration algorithm, vendor against rknnlite.

The model is ``silero_vad_openvino_16k.onnx`` from the ``silero-vad==6.2.3`` wheel (pass its
path): fixed ``input`` [1, 576] and ``state`` [2, 1, 128], a Conv front end and an LSTM.  Run
by the Python that has the toolkit::

    /var/tmp/rkt/bin/python tools/vendor_corpus/silero_calib.py MODEL vendor
    PYTHONPATH=. python tools/vendor_corpus/silero_calib.py MODEL rknnlite

Six synthetic 576-sample windows (tones with a little noise, and noise; no speech recording is
available here) are run through onnxruntime float, each from the state the float model left
after the window before (zeros for the first).  The same pairs (window, state) are the
calibration set and the test set.  For each algorithm (rk3588) the script prints the int8
speech probabilities beside float's and the correlation of the int8 output state with float's.
"""

import os
import sys
import tempfile

import numpy as np

ALGORITHMS = ("normal", "mmse", "kl_divergence")


def windows():
    """The six windows, float32 ``[1, 576]``."""
    rng = np.random.default_rng(5)
    t = np.arange(576) / 16000
    out = []
    for k in range(6):
        if k % 2 == 0:
            x = 0.3 * np.sin(2 * np.pi * (200 + 150 * k) * t) + 0.05 * rng.standard_normal(576)
        else:
            x = 0.2 * rng.standard_normal(576)
        out.append(x.astype(np.float32)[None])
    return out


def main(model: str, which: str) -> None:
    import onnxruntime as ort

    if which == "vendor":
        from rknn.api import RKNN
    else:
        from rknnlite.toolkit import RKNN
    model = os.path.abspath(model)
    wins = windows()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    states, ref = [np.zeros((2, 1, 128), np.float32)], []
    for w in wins:
        ref.append(session.run(None, {"input": w, "state": states[-1]}))
        states.append(ref[-1][1])
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        with open("dataset.txt", "w") as f:
            for k, w in enumerate(wins):
                np.save(f"i{k}.npy", w)
                np.save(f"s{k}.npy", states[k])
                f.write(f"i{k}.npy s{k}.npy\n")
        for algo in ALGORITHMS:
            rknn = RKNN(verbose=False)
            rknn.config(target_platform="rk3588", quantized_algorithm=algo)
            assert rknn.load_onnx(model, inputs=["input", "state"], input_size_list=[[1, 576], [2, 1, 128]]) == 0
            assert rknn.build(do_quantization=True, dataset="dataset.txt") == 0
            assert rknn.init_runtime() == 0
            probs, corr = [], []
            for k, w in enumerate(wins):
                out = rknn.inference(inputs=[w, states[k]], data_format=["nchw", "nchw"])
                probs.append(float(np.ravel(out[0])[0]))
                corr.append(float(np.corrcoef(np.ravel(out[1]), np.ravel(ref[k][1]))[0, 1]))
            rknn.release()
            print(f"{which} {algo}: probabilities {np.round(probs, 3).tolist()} "
                  f"(float {np.round([float(r[0].ravel()[0]) for r in ref], 3).tolist()}), "
                  f"state correlation {np.round(corr, 3).tolist()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""Call the rknnlite daemon with NVIDIA's unmodified ``tritonclient.http``.

Start a server with the bundled demo classifier, then run this client:

    rknnlite serve --model demo=$(python -c "from rknnlite.demo import DEMO_MODEL_PATH; print(DEMO_MODEL_PATH)")
    python examples/client_tritonclient.py [--url 127.0.0.1:8000] [--model demo] [--token TOKEN]

or let the example start one in-process on an ephemeral loopback port:

    python examples/client_tritonclient.py --local

It prints the server and model metadata, then classifies one image twice, with the binary
tensor data extension and with JSON tensors, and checks both against a local run.
Needs ``pip install "tritonclient[http]"`` (and the daemon extra for ``--local``).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def classify(url: str, model: str, token: str = None) -> int:
    import tritonclient.http as httpclient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    client = httpclient.InferenceServerClient(url)
    try:
        if not client.is_server_live():
            print(f"server at {url} is not live", file=sys.stderr)
            return 1
        print("server:", client.get_server_metadata(headers=headers))
        meta = client.get_model_metadata(model, headers=headers)
        print("model: ", meta)
        spec = meta["inputs"][0]
        shape = [1 if d < 0 else d for d in spec["shape"]]
        image = np.random.default_rng(0).integers(0, 256, shape).astype(np.float32)
        results = {}
        for binary in (True, False):
            tensor = httpclient.InferInput(spec["name"], shape, spec["datatype"])
            tensor.set_data_from_numpy(image, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput(o["name"], binary_data=binary) for o in meta["outputs"]]
            result = client.infer(model, [tensor], outputs=outputs, headers=headers)
            results[binary] = result.as_numpy(meta["outputs"][0]["name"])
            kind = "binary" if binary else "JSON"
            top = int(np.argmax(results[binary]))
            print(f"{kind:>6}: class {top}, score {results[binary].ravel()[top]:.4f}")
        np.testing.assert_allclose(results[True], results[False], rtol=1e-6)
        return 0
    finally:
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="127.0.0.1:8000", help="host:port of the daemon")
    ap.add_argument("--model", default="demo")
    ap.add_argument("--token", help="bearer token, if the daemon was started with --token")
    ap.add_argument("--local", action="store_true", help="start a daemon in-process with the demo model")
    args = ap.parse_args()
    if not args.local:
        return classify(args.url, args.model, args.token)
    from rknnlite.daemon import Server
    from rknnlite.demo import DEMO_MODEL_PATH

    with Server(models={"demo": str(DEMO_MODEL_PATH)}) as server:
        code = classify(f"127.0.0.1:{server.port}", "demo")
        from rknnlite import Context

        with Context(str(DEMO_MODEL_PATH)) as ctx:  # the same input, run locally
            image = np.random.default_rng(0).integers(0, 256, (1, 32, 32, 3)).astype(np.float32)  # NHWC
            print(" local: class", int(np.argmax(ctx.run([image])[0])))
        return code


if __name__ == "__main__":
    sys.exit(main())

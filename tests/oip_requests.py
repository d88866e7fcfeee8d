"""Open Inference Protocol v2 request bodies for the daemon's tests."""

import json
import struct

from rknnlite.daemon.protocol import datatype_of


def binary_body(arrays, outputs=None, request_id=None, **params):
    """``(body, header_length)`` of an infer request whose ``arrays`` (``[(name, ndarray)]``;
    object arrays of bytes are BYTES tensors) travel as binary data after the JSON header;
    ``outputs``, ``request_id`` and ``params`` (request parameters) go into the header."""
    tensors, raws = [], []
    for name, a in arrays:
        dt = "BYTES" if a.dtype.kind == "O" else datatype_of(a.dtype)
        raw = a.tobytes() if dt != "BYTES" else b"".join(struct.pack("<I", len(v)) + v for v in a.reshape(-1))
        tensors.append({"name": name, "shape": list(a.shape), "datatype": dt,
                        "parameters": {"binary_data_size": len(raw)}})
        raws.append(raw)
    doc = {"inputs": tensors}
    if outputs is not None:
        doc["outputs"] = outputs
    if request_id is not None:
        doc["id"] = request_id
    if params:
        doc["parameters"] = params
    header = json.dumps(doc).encode()
    return header + b"".join(raws), str(len(header))

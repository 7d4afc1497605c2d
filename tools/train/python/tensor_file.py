"""The weights interchange file between the PyTorch side and the TypeScript GGUF exporter.

Layout (little-endian): 8 bytes magic b"KQTW0001", u64 header length, a UTF-8 JSON header
{"tensors": [{"name", "shape", "offset"}], "meta": {...}}, then the f32 data of every tensor
(row-major, offsets relative to the end of the header). Shapes are row-major ([out, in]).
"""

import json
import os
import struct

import numpy as np

MAGIC = b"KQTW0001"


def write_tensor_file(path, tensors, meta=None):
    entries = []
    offset = 0
    arrays = []
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.numpy() if hasattr(t, "numpy") else t, dtype="<f4")
        entries.append({"name": name, "shape": list(a.shape), "offset": offset})
        arrays.append(a)
        offset += a.nbytes
    header = json.dumps({"tensors": entries, "meta": meta or {}}).encode("utf-8")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for a in arrays:
            f.write(a.tobytes())
    os.replace(tmp, path)


def read_tensor_file(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC:
        raise ValueError(f"{path}: not a KQTW0001 tensor file")
    (n,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16 : 16 + n])
    base = 16 + n
    out = {}
    for e in header["tensors"]:
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        out[e["name"]] = np.frombuffer(data, dtype="<f4", count=count, offset=base + e["offset"]).reshape(e["shape"])
    return out, header.get("meta", {})

# SPDX-License-Identifier: BSD-3-Clause
"""actorps: a parameter server for data-parallel training.

MXNet's KVStore semantics from Python::

    import numpy as np, actorps
    with actorps.KVStore.create("local") as kv:
        kv.init("w", np.zeros(4, np.float32))
        kv.push("w", np.ones(4, np.float32))
        out = np.empty(4, np.float32)
        kv.wait(kv.pull("w", out))

Values are float32 C-contiguous numpy arrays or CPU torch tensors, read and
written in place. Errors raise actorps.Error subclasses (UnknownKey,
ShapeMismatch, DeadNode, Unauthorized, Timeout, Closed, ...).
"""

from ._actorps import (  # noqa: F401
    AlreadyInitialized,
    BadConfig,
    BadOptimizer,
    CheckpointCorrupt,
    CheckpointIO,
    CheckpointMismatch,
    Closed,
    DeadNode,
    Error,
    KVStore,
    NotInitialized,
    ShapeMismatch,
    Ticket,
    Timeout,
    Unauthorized,
    UnknownKey,
)

#: Node groups for KVStore.num_dead_node (or them together).
COORDINATOR = 1
SERVERS = 2
WORKERS = 4


def create(type="local", **options):
    """Same as KVStore.create."""
    return KVStore.create(type, **options)


def load_safetensors(path):
    """The tensors of a safetensors file (as KVStore.export_weights writes)
    as a dict of numpy arrays of their shapes, plus the file's metadata:
    ``(tensors, metadata)``. Only float32 ("F32") tensors are read. For
    PyTorch: ``{k: torch.from_numpy(v) for k, v in tensors.items()}``."""
    import json
    import struct

    import numpy as np

    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name!r} is {t['dtype']}, "
                             "not F32")
        begin, end = t["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name!r} lies outside the file")
        values = np.frombuffer(data[begin:end], dtype="<f4")
        tensors[name] = values.reshape(t["shape"]).copy()
    return tensors, metadata


__all__ = [
    "KVStore", "Ticket", "create", "load_safetensors", "Error", "UnknownKey", "ShapeMismatch",
    "NotInitialized", "AlreadyInitialized", "BadOptimizer", "DeadNode",
    "Timeout", "Unauthorized", "BadConfig", "Closed", "CheckpointIO",
    "CheckpointCorrupt", "CheckpointMismatch", "COORDINATOR", "SERVERS",
    "WORKERS",
]

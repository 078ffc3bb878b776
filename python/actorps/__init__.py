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


__all__ = [
    "KVStore", "Ticket", "create", "Error", "UnknownKey", "ShapeMismatch",
    "NotInitialized", "AlreadyInitialized", "BadOptimizer", "DeadNode",
    "Timeout", "Unauthorized", "BadConfig", "Closed", "CheckpointIO",
    "CheckpointCorrupt", "CheckpointMismatch", "COORDINATOR", "SERVERS",
    "WORKERS",
]

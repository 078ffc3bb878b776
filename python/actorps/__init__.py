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

import numpy as np

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


def _key_list(key, values, call):
    """The (key, value) pairs of a call given a list of keys (MXNet's list
    form): one value (or one list of values) per key."""
    if not isinstance(values, (list, tuple)) or len(values) != len(key):
        raise ValueError(f"{call}: {len(key)} keys need as many values "
                         "(a list, one per key)")
    return zip(key, values)


def _write(out, values):
    """Copies `values` into the caller's array or tensor `out` (same number
    of elements)."""
    if hasattr(out, "numpy") and not isinstance(out, np.ndarray):
        out = out.numpy()  # a CPU torch.Tensor shares its memory
    if out.size != values.size:
        raise ShapeMismatch(f"row_sparse_pull: out holds {out.size} floats, "
                            f"the rows {values.size}")
    np.copyto(out, values.reshape(out.shape))


def _size(x):
    """The number of elements of a numpy array or torch tensor."""
    return x.numel() if hasattr(x, "numel") else np.asarray(x).size


def _mxnet_forms(cls):
    """MXNet's list forms and names on top of the module's calls: init,
    push and pull take a list of keys with one value (or list of values)
    each, pull and pushpull take ``out=``, and pushpull / row_sparse_pull
    name push_pull / pull_rows as MXNet does. A call on a list of keys
    returns a list of tickets where the single call returns one; wait takes
    such a list too."""
    init, push, pull = cls.init, cls.push, cls.pull
    push_pull, wait = cls.push_pull, cls.wait
    compression = cls.set_gradient_compression
    save_states, load_states = cls.save_optimizer_states, cls.load_optimizer_states
    load_whole = cls.load_checkpoint

    def file_of(fname, path, call):
        if (fname is None) == (path is None):
            raise TypeError(f"{call}: give the file as fname (MXNet's name) "
                            "or path, once")
        return fname if fname is not None else path

    def save_optimizer_states(self, fname=None, dump_optimizer=False,
                              path=None):
        """Writes a checkpoint: weights, optimizer states and settings
        (dump_optimizer: load_optimizer_states takes the settings too)."""
        save_states(self, file_of(fname, path, "save_optimizer_states"),
                    dump_optimizer)

    def load_optimizer_states(self, fname=None, path=None):
        """MXNet's: loads the optimizer states of a checkpoint; the weights
        stay as they are (README)."""
        load_states(self, file_of(fname, path, "load_optimizer_states"))

    def load_checkpoint(self, fname=None, path=None):
        """Loads a checkpoint whole (weights, states, optimizer): an exact
        resume."""
        load_whole(self, file_of(fname, path, "load_checkpoint"))

    def init_(self, key, value):
        """Initializes `key` (rank 0's value is stored), or each key of a
        list with its value. A list of values for one key is DJL's form
        (one copy per device, all of one size): the first is stored."""
        if isinstance(key, (list, tuple)):
            for k, v in _key_list(key, value, "init"):
                init_(self, k, v)
        elif isinstance(value, (list, tuple)):
            if not value:
                raise ShapeMismatch(f"init: no value given for key {key!r}")
            sizes = {_size(v) for v in value}
            if len(sizes) > 1:
                raise ShapeMismatch(f"init: the copies of key {key!r} differ "
                                    f"in size ({sorted(sizes)})")
            init(self, key, value[0])
        else:
            init(self, key, value)

    def update(self, key, grads, params, priority=0):
        """DJL's ParameterServer.update: pushes the sum of `grads` (an
        array, or a list of one per device), then pulls the updated value
        into `params` (an array or a list) and waits for it. In a sync
        store it returns once the round of every worker is applied."""
        outs = params if isinstance(params, (list, tuple)) else [params]
        if not outs:
            raise ShapeMismatch(f"update: no parameter array given for key "
                                f"{key!r}")
        want = int(np.prod(self.shape(key)))
        for p in outs:
            if _size(p) != want:
                raise ShapeMismatch(f"update: key {key!r} holds {want} floats "
                                    f"but a parameter array {_size(p)}")
        push(self, key, grads, priority)
        wait(self, pull(self, key, params, priority))

    def push_(self, key, value, priority=0):
        """Pushes `value` (or the sum of a list of values) to `key`, or to
        each key of a list its value."""
        if isinstance(key, (list, tuple)):
            for k, v in _key_list(key, value, "push"):
                push(self, k, v, priority)
        else:
            push(self, key, value, priority)

    def pull_(self, key, out=None, priority=0, ignore_sparse=True):
        """Pulls `key` into `out` (or into each array of a list), or each
        key of a list into its output; wait on what it returns. The outputs
        are dense arrays, so MXNet's `ignore_sparse` (skip row_sparse
        outputs) has nothing to skip; a row table is pulled with
        row_sparse_pull or pull_rows."""
        if out is None:
            raise ValueError("pull: out= must name the array(s) to fill")
        if isinstance(key, (list, tuple)):
            return [pull(self, k, o, priority)
                    for k, o in _key_list(key, out, "pull")]
        return pull(self, key, out, priority)

    def pushpull_(self, key, value, out=None, priority=0):
        """Pushes `value` to `key` and pulls the result into `out` (MXNet's
        pushpull; without out, into `value` itself), or so for each key of
        a list."""
        if out is None:
            out = value

        def one(k, v, o):
            if isinstance(v, (list, tuple)) or isinstance(o, (list, tuple)):
                # Several devices' copies (MXNet): their sum is pushed, and
                # every output gets the result; the pull is ordered after
                # the push, as one push_pull is.
                push(self, k, v, priority)
                return pull(self, k, o, priority)
            return push_pull(self, k, v, o, priority)

        if isinstance(key, (list, tuple)):
            return [one(k, v, o)
                    for (k, v), (_, o) in zip(
                        _key_list(key, value, "pushpull"),
                        _key_list(key, out, "pushpull"))]
        return one(key, value, out)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """MXNet's row_sparse_pull. With `out` of the key's full shape
        [rows, ...] (MXNet's form), the rows named in `row_ids` are filled
        and every other row is zeroed, as MXNet's row_sparse output reads
        densely; otherwise `out` gets one row per id in the order given
        (repeated ids repeat their row). `out` may be a list of outputs,
        with one list of ids for all or one per output; a key or a list
        of keys may be a row table (init_table) or a dense key (its rows
        taken from a whole pull). Returns a ticket to wait on (None when
        the pull already completed: MXNet's form, or a dense key)."""
        if out is None or row_ids is None:
            raise ValueError("row_sparse_pull: out= and row_ids= are needed")
        if isinstance(key, (list, tuple)):
            return [row_sparse_pull(self, k, o, priority, r)
                    for (k, o), (_, r) in zip(
                        _key_list(key, out, "row_sparse_pull"),
                        _key_list(key, row_ids, "row_sparse_pull"))]
        if isinstance(out, (list, tuple)):
            per_out = (isinstance(row_ids, (list, tuple)) and len(row_ids) > 0
                       and not np.isscalar(row_ids[0]))
            if per_out and len(row_ids) != len(out):
                raise ValueError(f"row_sparse_pull: {len(out)} outputs need "
                                 "one list of row ids or one per output")
            return [row_sparse_pull(self, key, o, priority,
                                    row_ids[i] if per_out else row_ids)
                    for i, o in enumerate(out)]
        shape = self.shape(key)
        rows = shape[0]
        dim = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        ids = np.asarray(row_ids, dtype=np.int64).ravel()
        full = tuple(getattr(out, "shape", ())) == tuple(shape)
        if not full:
            # One row per id, in the order given.
            try:
                return self.pull_rows(key, ids, out, priority)
            except ShapeMismatch as e:
                if "not a row table" not in str(e):
                    raise
            whole = np.empty(rows * dim, np.float32)
            wait(self, pull(self, key, whole, priority))
            if np.any((ids < 0) | (ids >= rows)):
                raise UnknownKey(f"row_sparse_pull: a row id out of range "
                                 f"(key {key!r} has {rows} rows)")
            picked = whole.reshape(rows, dim)[ids]
            _write(out, picked)
            return None
        # MXNet's form: the rows named, each once, in place; zeros elsewhere.
        wanted = np.unique(ids)
        if wanted.size and (wanted[0] < 0 or wanted[-1] >= rows):
            raise UnknownKey(f"row_sparse_pull: a row id out of range "
                             f"(key {key!r} has {rows} rows)")
        got = np.empty(wanted.size * dim, np.float32)
        if wanted.size:
            try:
                wait(self, self.pull_rows(key, wanted, got, priority))
            except ShapeMismatch as e:
                if "not a row table" not in str(e):
                    raise
                whole = np.empty(rows * dim, np.float32)
                wait(self, pull(self, key, whole, priority))
                got = whole.reshape(rows, dim)[wanted].ravel()
        dense = np.zeros((rows, dim), np.float32)
        dense[wanted] = got.reshape(wanted.size, dim)
        _write(out, dense)
        return None

    def broadcast(self, key, value, out, priority=0):
        """MXNet's broadcast: initializes `key` (or each key of a list) with
        rank 0's `value` and pulls it into `out`; wait on what it
        returns."""
        init_(self, key, value)
        return pull_(self, key, out, priority)

    def set_gradient_compression_(self, spec, key=None):
        """Sets gradient compression: "none", "fp16", "2bit" or
        "2bit:THRESHOLD", or MXNet's dict {"type": "2bit", "threshold":
        0.5} (MXNet's default threshold is 0.5)."""
        if isinstance(spec, dict):
            params = dict(spec)
            kind = str(params.pop("type", "")).lower()
            threshold = params.pop("threshold", 0.5)
            if params:
                raise ValueError("set_gradient_compression: unknown "
                                 f"parameter(s) {sorted(params)}")
            if kind == "2bit":
                spec = f"2bit:{float(threshold)!r}"
            elif kind in ("none", "fp16"):
                spec = kind
            else:
                raise ValueError("set_gradient_compression: type must be "
                                 f"2bit, fp16 or none, got {kind!r}")
        compression(self, spec, key)

    def is_capable(self, capability):
        """MXNet's is_capable: whether the store does `capability`
        (KVStore.OPTIMIZER: the servers run the optimizer)."""
        if str(capability).lower() == "optimizer":
            return True
        raise ValueError(f"Unknown capability: {capability}")

    def wait_(self, ticket):
        """Waits for a ticket (or each of a list of tickets; None: a call
        that completed before it returned)."""
        if isinstance(ticket, (list, tuple)):
            for t in ticket:
                wait_(self, t)
        elif ticket is not None:
            wait(self, ticket)

    cls.init, cls.push, cls.pull, cls.wait = init_, push_, pull_, wait_
    cls.pushpull = pushpull_
    cls.push_pull = pushpull_
    cls.row_sparse_pull = row_sparse_pull
    cls.broadcast = broadcast
    cls.update = update
    cls.set_gradient_compression = set_gradient_compression_
    cls.is_capable = is_capable
    cls.OPTIMIZER = "optimizer"
    cls.save_optimizer_states = save_optimizer_states
    cls.load_optimizer_states = load_optimizer_states
    cls.load_checkpoint = load_checkpoint
    # MXNet 1.x's underscore names for these calls.
    cls._barrier = cls.barrier
    cls._send_command_to_servers = cls.send_command_to_servers


_mxnet_forms(KVStore)


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

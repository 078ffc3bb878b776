# SPDX-License-Identifier: BSD-3-Clause
"""The Python module: MXNet's KVStore semantics on numpy arrays and torch
tensors, in place, with one exception class per error."""

import os
import threading
import time

import numpy as np
import pytest

import actorps

torch = pytest.importorskip("torch")


def f32(*values):
    return np.array(values, dtype=np.float32)


def test_round_trips_numpy_and_torch_exactly():
    with actorps.KVStore.create("local", num_shards=3) as kv:
        assert kv.type == "local" and kv.rank == 0 and kv.num_workers == 1
        w = np.arange(12, dtype=np.float32).reshape(3, 4)
        kv.init("w", w)
        assert kv.shape("w") == [3, 4]
        out = np.zeros((3, 4), np.float32)
        kv.wait(kv.pull("w", out))
        assert np.array_equal(out, w)
        # No optimizer: the stored value becomes the push (MXNet).
        kv.push("w", np.full((3, 4), 7, np.float32))
        t = torch.zeros(3, 4)
        kv.wait(kv.pull("w", t))
        assert torch.equal(t, torch.full((3, 4), 7.0))
        # Several devices' values are summed; several outputs each filled.
        kv.push("w", [np.ones((3, 4), np.float32), torch.ones(3, 4) * 2])
        outs = [np.zeros((3, 4), np.float32), torch.zeros(3, 4)]
        kv.wait(kv.pull("w", outs))
        assert np.array_equal(outs[0], np.full((3, 4), 3, np.float32))
        assert torch.equal(outs[1], torch.full((3, 4), 3.0))
        # Integer keys, as MXNet accepts.
        kv.init(3, f32(1, 2))
        got = np.zeros(2, np.float32)
        kv.wait(kv.pull(3, got))
        assert np.array_equal(got, f32(1, 2))


def test_many_key_calls_and_push_pull():
    with actorps.KVStore.create("local") as kv:
        keys = [f"k{i}" for i in range(50)]
        for i, k in enumerate(keys):
            kv.init(k, np.full(i + 1, i, np.float32))
        kv.set_optimizer("accumulate")
        kv.push_many(keys, [np.ones(i + 1, np.float32) for i in range(50)])
        outs = [np.zeros(i + 1, np.float32) for i in range(50)]
        kv.wait(kv.pull_many(keys, outs))
        for i, o in enumerate(outs):
            assert np.array_equal(o, np.full(i + 1, i + 1, np.float32))
        outs2 = [torch.zeros(i + 1) for i in range(50)]
        kv.wait(kv.push_pull_many(keys, outs, outs2))
        for i, o in enumerate(outs2):
            assert torch.equal(o, torch.full((i + 1,), 2.0 * (i + 1)))
        out = np.zeros(1, np.float32)
        kv.wait(kv.push_pull("k0", f32(5), out))
        assert out[0] == 2 + 5


def test_mxnet_list_forms_and_names():
    with actorps.KVStore.create("local") as kv:
        kv.init(["a", "b"], [np.zeros(3, np.float32), np.zeros(2, np.float32)])
        kv.set_optimizer("accumulate")
        # A list of keys, one value each; a list of values for one key is
        # summed before the update (MXNet's push of several devices' copies).
        kv.push(["a", "b"], [np.full(3, 2, np.float32),
                             [np.ones(2, np.float32), np.ones(2, np.float32)]])
        a = np.zeros(3, np.float32)
        b = [np.zeros(2, np.float32), np.zeros(2, np.float32)]
        kv.wait(kv.pull(["a", "b"], out=[a, b]))
        assert np.array_equal(a, np.full(3, 2, np.float32))
        for o in b:
            assert np.array_equal(o, np.full(2, 2, np.float32))
        # pushpull: into out=, or into the pushed array itself.
        out = np.zeros(3, np.float32)
        kv.wait(kv.pushpull("a", np.ones(3, np.float32), out=out))
        assert np.array_equal(out, np.full(3, 3, np.float32))
        v = np.ones(3, np.float32)
        kv.wait(kv.pushpull("a", v))
        assert np.array_equal(v, np.full(3, 4, np.float32))
        # Several devices' copies: their sum is pushed, each output filled
        # (into the copies themselves without out=).
        copies = [np.ones(3, np.float32), np.full(3, 2, np.float32)]
        outs = [np.zeros(3, np.float32), np.zeros(3, np.float32)]
        kv.wait(kv.pushpull("a", copies, out=outs))
        for o in outs:
            assert np.array_equal(o, np.full(3, 7, np.float32))
        kv.wait(kv.pushpull(["a"], [copies]))
        for c in copies:
            assert np.array_equal(c, np.full(3, 10, np.float32))
        # row_sparse_pull names pull_rows: one row per id, in order.
        kv.init_table("t", 10, 2)
        kv.push_rows("t", [1, 3], np.array([1, 2, 3, 4], np.float32))
        rows = np.zeros(4, np.float32)
        kv.wait(kv.row_sparse_pull("t", out=rows, row_ids=[3, 1]))
        assert np.array_equal(rows, np.array([3, 4, 1, 2], np.float32))
        with pytest.raises(ValueError):
            kv.push(["a", "b"], [np.ones(3, np.float32)])
        with pytest.raises(ValueError):
            kv.pull("a")
        with pytest.raises(ValueError):
            kv.pushpull(["a", "b"], [np.ones(3, np.float32),
                                     np.ones(2, np.float32)],
                        out=[np.zeros(3, np.float32)])
        # pull takes MXNet's ignore_sparse (dense outputs: nothing skipped).
        kv.wait(kv.pull("a", out=out, ignore_sparse=False))
        assert np.array_equal(out, np.full(3, 10, np.float32))
        # broadcast: init with rank 0's value, then pull it.
        got = np.zeros(2, np.float32)
        kv.wait(kv.broadcast("c", f32(7, 8), out=got))
        assert np.array_equal(got, f32(7, 8))
        with pytest.raises(actorps.AlreadyInitialized):
            kv.broadcast("c", f32(1, 1), out=got)
        assert kv.is_capable(actorps.KVStore.OPTIMIZER)
        kv._barrier()  # MXNet 1.x's name (one worker: returns at once)
        kv._send_command_to_servers(0, "name=accumulate")
        with pytest.raises(ValueError, match="capability"):
            kv.is_capable("teleport")
        # MXNet's dict form of gradient compression (threshold 0.5 unless
        # given): 1.0 crosses as 0.5, 0.2 as 0, -0.7 as -0.5.
        kv.init("g", np.zeros(3, np.float32))
        kv.set_gradient_compression({"type": "2bit"}, key="g")
        kv.push("g", f32(1.0, 0.2, -0.7))
        g = np.zeros(3, np.float32)
        kv.wait(kv.pull("g", out=g))
        assert np.array_equal(g, f32(0.5, 0, -0.5))
        kv.set_gradient_compression({"type": "2bit", "threshold": 0.25},
                                    key="g")
        kv.push("g", f32(0.3, 0, 0))
        kv.wait(kv.pull("g", out=g))
        # 0.3 crosses as the new threshold, 0.25 (at 0.5 it would not).
        assert g[0] == 0.75
        with pytest.raises(ValueError, match="type must be"):
            kv.set_gradient_compression({"type": "1bit"})
        with pytest.raises(ValueError, match="unknown parameter"):
            kv.set_gradient_compression({"type": "2bit", "bits": 3})


def test_optimizer_and_priority_keep_the_order():
    with actorps.KVStore.create("local") as kv:
        kv.init("w", f32(1, 1))
        kv.set_optimizer("sgd", learning_rate=0.5)
        out = np.zeros(2, np.float32)
        kv.push("w", f32(1, 2), priority=5)
        t = kv.pull("w", out, priority=-3)
        kv.wait_only(t)
        # The pull sees the push issued before it, whatever the priorities.
        assert np.array_equal(out, f32(0.5, 0.0))
        kv.wait_all()


def test_djl_init_and_update_with_several_devices():
    # DJL's ParameterServer: init with one copy per device, update with
    # each device's gradient; the optimizer runs once on their sum and
    # every copy (numpy or torch) gets the result.
    with actorps.KVStore.create("local") as kv:
        kv.init("w", [f32(1, 2, 3), f32(1, 2, 3)])
        kv.set_optimizer("sgd", learning_rate=0.5)
        a = np.zeros(3, np.float32)
        b = torch.zeros(3)
        kv.update("w", [f32(1, 1, 1), f32(1, 3, 5)], [a, b])
        want = f32(1, 2, 3) - 0.5 * f32(2, 4, 6)
        assert np.array_equal(a, want)
        assert np.array_equal(b.numpy(), want)
        # One array each is the single-device form.
        kv.update("w", f32(2, 2, 2), a)
        assert np.array_equal(a, want - 1)
        # Refused before anything is pushed.
        with pytest.raises(actorps.ShapeMismatch):
            kv.init("v", [f32(1, 2), f32(1, 2, 3)])
        with pytest.raises(actorps.ShapeMismatch):
            kv.update("w", f32(1, 1, 1), [a, np.zeros(2, np.float32)])
        with pytest.raises(actorps.ShapeMismatch):
            kv.update("w", f32(1, 1, 1), [])
        with pytest.raises(actorps.UnknownKey):
            kv.update("nope", f32(1, 1, 1), a)
        kv.wait(kv.pull("w", a))
        assert np.array_equal(a, want - 1)


def test_refuses_wrong_arrays_before_sending():
    with actorps.KVStore.create("local") as kv:
        kv.init("w", np.zeros(6, np.float32))
        with pytest.raises(TypeError, match="float32"):
            kv.push("w", np.zeros(6))
        with pytest.raises(TypeError, match="C-contiguous"):
            kv.push("w", np.zeros((3, 2), np.float32).T)
        with pytest.raises(TypeError, match="torch.float32"):
            kv.push("w", torch.zeros(6, dtype=torch.float64))
        with pytest.raises(TypeError, match="contiguous"):
            kv.push("w", torch.zeros(3, 2).t())
        # A tensor off the CPU (no GPU here: the meta device stands in).
        with pytest.raises(TypeError, match="CPU.*meta"):
            kv.push("w", torch.zeros(6, device="meta"))
        with pytest.raises(TypeError, match="dense"):
            kv.push("w", torch.zeros(6).to_sparse())
        with pytest.raises(TypeError, match="negative"):
            kv.push("w", torch.zeros(6).neg().conj_physical()._neg_view())
        with pytest.raises(TypeError, match="numpy array"):
            kv.push("w", [1.0] * 6)
        with pytest.raises(TypeError, match="writable"):
            ro = np.zeros(6, np.float32)
            ro.setflags(write=False)
            kv.pull("w", ro)
        with pytest.raises(TypeError, match="key"):
            kv.push(1.5, np.zeros(6, np.float32))
        # An int key of any size is the key its digits spell.
        with pytest.raises(actorps.UnknownKey, match="36893488147419103232"):
            kv.push(2 ** 65, np.zeros(6, np.float32))
        # A size mismatch names what arrived and what is needed.
        with pytest.raises(actorps.ShapeMismatch, match="6 floats") as e:
            kv.push("w", np.zeros(5, np.float32))
        assert isinstance(e.value, ValueError)
        with pytest.raises(ValueError, match="2 keys but 1"):
            kv.push_many(["w", "w"], [np.zeros(6, np.float32)])
        # Nothing was sent: the value is untouched.
        out = np.ones(6, np.float32)
        kv.wait(kv.pull("w", out))
        assert not out.any()


def test_every_error_class_comes_from_a_real_call(tmp_path):
    with pytest.raises(actorps.BadConfig):
        actorps.KVStore.create("nonsense")
    with pytest.raises(TypeError, match="unknown option"):
        actorps.KVStore.create("local", num_shardz=2)
    with pytest.raises(ValueError, match="timeout"):
        actorps.KVStore.create("local", timeout=-1)
    kv = actorps.KVStore.create("local", num_workers=2, barrier_timeout=0.2)
    kv.init("w", np.zeros(2, np.float32))
    with pytest.raises(actorps.UnknownKey, match="nokey"):
        kv.pull("nokey", np.zeros(2, np.float32))
    with pytest.raises(actorps.AlreadyInitialized):
        kv.init("w", np.zeros(2, np.float32))
    with pytest.raises(actorps.BadOptimizer, match="learning_rate"):
        kv.set_optimizer("sgd", learning_rate=-1)
    with pytest.raises(actorps.BadOptimizer):
        kv.set_optimizer("no-such-optimizer")
    with pytest.raises(actorps.CheckpointIO):
        kv.load_optimizer_states(str(tmp_path / "missing.ckpt"))
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint at all" * 10)
    with pytest.raises(actorps.CheckpointCorrupt):
        kv.load_optimizer_states(str(garbage))
    saved = str(tmp_path / "saved.ckpt")
    kv.save_optimizer_states(saved)
    with actorps.KVStore.create("local") as other:
        other.init("w", np.zeros(3, np.float32))
        with pytest.raises(actorps.CheckpointMismatch):
            other.load_optimizer_states(saved)
    # Worker 1 never arrives: the barrier times out.
    with pytest.raises(actorps.Timeout):
        kv.barrier()
    assert issubclass(actorps.Timeout, TimeoutError)
    kv.set_barrier_before_exit(False)
    kv.close()
    assert kv.closed
    with pytest.raises(actorps.Closed):
        kv.push("w", np.zeros(2, np.float32))
    # Nobody listens there: the coordinator is unreachable.
    with pytest.raises(actorps.DeadNode):
        actorps.KVStore.create("dist_async", coordinator="127.0.0.1:1",
                               token="t", connect_timeout=0.2)
    for cls in (actorps.UnknownKey, actorps.DeadNode, actorps.Closed):
        assert issubclass(cls, actorps.Error)


def test_optimizer_states_load_as_mxnet_and_checkpoints_load_whole(tmp_path):
    # MXNet: load_optimizer_states brings the updater's states back, not the
    # weights; load_checkpoint (actorps) brings both.
    w0 = np.linspace(-1, 1, 8).astype(np.float32)
    g = np.arange(8, dtype=np.float32) - 3
    path = str(tmp_path / "opt.states")
    with actorps.KVStore.create("local") as kv:
        kv.set_optimizer("sgd", learning_rate=0.1, momentum=0.9)
        kv.init("w", w0)
        kv.push("w", g)
        saved = np.empty(8, np.float32)
        kv.wait(kv.pull("w", saved))
        kv.save_optimizer_states(fname=path, dump_optimizer=True)
        kv.push("w", 2 * g)
        now = np.empty(8, np.float32)
        kv.wait(kv.pull("w", now))
        assert not np.array_equal(now, saved)
        kv.load_optimizer_states(path)
        out = np.empty(8, np.float32)
        kv.wait(kv.pull("w", out))
        np.testing.assert_array_equal(out, now)
        kv.load_checkpoint(path=path)  # the name before MXNet's fname
        kv.wait(kv.pull("w", out))
        np.testing.assert_array_equal(out, saved)
        with pytest.raises(TypeError, match="once"):
            kv.load_checkpoint(path, path=path)


def test_set_updater_runs_python_on_every_push_as_mxnet(monkeypatch):
    # MXNet's test_updater: four devices' copies of three keys, pushed
    # three times, through updater(key, recv, local): local += recv.
    raised = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: raised.append(u))
    with actorps.KVStore.create("local") as kv:
        keys = [5, 7, 11]
        kv.init(keys, [np.zeros(16, np.float32)] * 3)
        kv.init("name", np.zeros(2, np.float32))
        seen = set()

        def updater(key, recv, local):
            seen.add(key)
            local += recv

        kv._set_updater(updater)
        vals = [np.ones(16, np.float32) for _ in range(4)]
        for _ in range(3):
            kv.push(keys, [vals] * 3)
        kv.push("name", f32(1, 2))
        outs = [np.empty(16, np.float32) for _ in range(4)]
        for k in keys:
            kv.wait(kv.pull(k, out=outs))
            for o in outs:
                assert np.array_equal(o, np.full(16, 12, np.float32))
        # Keys come back as given: ints as ints, names as str.
        assert seen == {5, 7, 11, "name"}
        assert not raised

        # A rule that raises (here: one that calls the store, which waits
        # for it) is reported as Python reports an exception it cannot
        # raise anywhere, and the weights stay.
        def calls_the_store(key, recv, local):
            kv.pull(key, out=np.zeros(2, np.float32))

        kv._set_updater(calls_the_store)
        kv.push("name", f32(5, 5))
        out = np.zeros(2, np.float32)
        kv.wait(kv.pull("name", out=out))
        assert np.array_equal(out, f32(1, 2))
        assert len(raised) == 1
        assert "must not call the store" in str(raised[0].exc_value)
        # None gives the optimizer back (none set: a push assigns).
        kv._set_updater(None)
        kv.push("name", f32(3, 4))
        kv.wait(kv.pull("name", out=out))
        assert np.array_equal(out, f32(3, 4))
        with pytest.raises(TypeError, match="callable"):
            kv._set_updater(3)
        # MXNet's Test optimizer (its nightly dist test's): weight +=
        # rescale_grad * grad.
        kv.set_optimizer("test", rescale_grad=2)
        kv.push("name", f32(1, 0.5))
        kv.wait(kv.pull("name", out=out))
        assert np.array_equal(out, f32(5, 5))


def test_row_sparse_pull_in_mxnet_form_fills_rows_in_place():
    # MXNet's check_row_sparse_pull: outputs of the table's full shape get
    # the rows named (repeated, 2-D ids) and zeros elsewhere, one list of ids
    # for several outputs or one per output; on a table and on a dense key.
    rows, dim = 8, 3
    rng = np.random.default_rng(7)
    with actorps.KVStore.create("local") as kv:
        kv.init_table("e", rows, dim, fill="constant", low=1, high=1)
        kv.init("d", np.ones((rows, dim), np.float32))
        for key in ("e", "d"):
            for count in (1, 3):
                vals = [np.full((rows, dim), 5, np.float32)
                        for _ in range(count)]
                ids = [rng.integers(rows, size=rows).reshape(2, rows // 2)
                       for _ in range(count)]
                same = count == 1 or key == "d"
                kv.wait(kv.row_sparse_pull(
                    key, out=vals[0] if count == 1 else vals,
                    row_ids=ids[0] if same else ids))
                for val, row_id in zip(vals, ids if not same else
                                       [ids[0]] * count):
                    for row in range(rows):
                        want = 1 if row in row_id else 0
                        assert np.all(val[row] == want), (key, count, row)
        # The per-id form keeps its order and repeats.
        out = np.zeros(3 * dim, np.float32)
        kv.push_rows("e", [2], np.full(dim, 4, np.float32))
        kv.wait(kv.row_sparse_pull("e", out=out, row_ids=[2, 0, 2]))
        assert out.tolist() == [4] * dim + [1] * dim + [4] * dim
        with pytest.raises(actorps.UnknownKey, match="out of range"):
            kv.row_sparse_pull("e", out=np.zeros((rows, dim), np.float32),
                               row_ids=[rows])


def test_context_manager_closes():
    with actorps.KVStore.create("local") as kv:
        kv.init("w", np.zeros(2, np.float32))
        assert not kv.closed
    assert kv.closed
    # Leaving on an exception closes too, and the exception is the one seen.
    with pytest.raises(KeyError):
        with actorps.KVStore.create("local") as kv2:
            raise KeyError("from the block")
    assert kv2.closed


def test_threads_with_their_own_handles_push_concurrently():
    rounds = 200
    with actorps.KVStore.create("local_sync", num_workers=2) as kv0:
        kv1 = kv0.worker(1)
        handles = [kv0, kv1]
        kv0.init("w", np.zeros(1000, np.float32))
        kv0.set_optimizer("accumulate")
        errors = []

        def train(kv):
            try:
                grad = np.full(1000, kv.rank + 1, np.float32)
                out = np.zeros(1000, np.float32)
                for r in range(rounds):
                    kv.push("w", grad)
                    kv.wait(kv.pull("w", out))
                    # Sync: every round sums both workers' pushes.
                    assert out[0] == 3 * (r + 1)
            except Exception as e:  # reported to the main thread
                errors.append(e)

        threads = [threading.Thread(target=train, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        kv1.close()


def test_a_pull_keeps_its_output_alive_until_waited():
    with actorps.KVStore.create("local") as kv:
        kv.init("w", np.arange(100000, dtype=np.float32))
        t = kv.pull("w", np.zeros(100000, np.float32))
        # The only reference to the output is the store's: no crash, and
        # the wait succeeds.
        kv.wait(t)
        out = np.zeros(100000, np.float32)
        kv.wait(kv.pull("w", out))
        assert out[-1] == 99999


def test_dist_sync_workers_compute_exact_sums(job_factory):
    workers, rounds = 3, 20
    job = job_factory("dist_sync", workers)
    errors = []
    results = {}

    def worker(name):
        try:
            with actorps.KVStore.create(name,
                                        coordinator=job.address,
                                        token=job.token) as kv:
                # "dist" takes the job's mode; MXNet's dist_device_sync is
                # dist_sync.
                assert kv.type == ("dist_sync" if name == "dist" else name)
                assert kv.synchronous
                kv.init("w", np.zeros(300, np.float32))
                if kv.rank == 0:
                    kv.set_optimizer("accumulate")
                kv.barrier()
                grad = np.full(300, kv.rank + 1, np.float32)
                out = np.zeros(300, np.float32)
                for _ in range(rounds):
                    kv.push("w", grad)
                    kv.wait(kv.pull("w", out))
                results[kv.rank] = out.copy()
                assert kv.num_dead_node(actorps.WORKERS) == 0
        except Exception as e:  # reported to the main thread
            errors.append(e)

    names = ["dist_sync", "dist_device_sync", "dist"]
    threads = [threading.Thread(target=worker, args=(names[i],))
               for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    expected = rounds * workers * (workers + 1) / 2
    assert sorted(results) == list(range(workers))
    for out in results.values():
        assert np.all(out == expected)
    assert job.coordinator.stop() == 0
    assert job.server.stop() == 0


def test_a_wrong_token_is_unauthorized(job_factory):
    job = job_factory("dist_async", 1)
    with pytest.raises(actorps.Unauthorized, match="token"):
        actorps.KVStore.create("dist_async", coordinator=job.address,
                               token="not-the-token")
    assert issubclass(actorps.Unauthorized, PermissionError)


def test_the_environment_names_the_job(job_factory, monkeypatch):
    job = job_factory("dist_async", 1)
    monkeypatch.setenv("ACTORPS_COORDINATOR", job.address)
    monkeypatch.setenv("ACTORPS_TOKEN", job.token)
    with actorps.KVStore.create("dist") as kv:
        assert kv.type == "dist_async" and kv.num_workers == 1
        kv.init("w", f32(4, 5))
        out = np.zeros(2, np.float32)
        kv.wait(kv.pull("w", out))
        assert np.array_equal(out, f32(4, 5))
    assert job.coordinator.stop() == 0


def interrupted_run(tmp_path, code):
    """Runs `code` in a new interpreter; once it printed 'waiting', sends it
    SIGINT. Its exit code, the rest of its output and the seconds since."""
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "wait.py"
    script.write_text(code)
    p = subprocess.Popen([sys.executable, str(script)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        start = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc = p.wait(30)
        return rc, p.stdout.read().strip(), time.monotonic() - start
    finally:
        if p.poll() is None:
            p.kill()


def test_ctrl_c_interrupts_a_long_wait(tmp_path):
    # The barrier waits for a worker that never comes: only Ctrl-C ends it
    # before its 120 s (the signal may land before the wait began: then it
    # interrupts the first check).
    rc, rest, seconds = interrupted_run(
        tmp_path,
        "import sys, actorps\n"
        "kv = actorps.KVStore.create('local', num_workers=2,"
        " barrier_timeout=120)\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    kv.barrier()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    kv.set_barrier_before_exit(False)\n"
        "    kv.close()\n"
        "    sys.exit(3)\n")
    assert (rc, rest) == (3, "interrupted")
    assert seconds < 30


def test_ctrl_c_ends_a_wait_on_several_pending_operations(tmp_path):
    # Sync pulls of worker 0 wait for worker 1's pushes, which never come:
    # wait_all holds three of them, each with a 120 s timeout.
    rc, rest, seconds = interrupted_run(
        tmp_path,
        "import os, numpy as np, actorps\n"
        "kv = actorps.KVStore.create('local_sync', num_workers=2,"
        " timeout=120)\n"
        "outs = []\n"
        "for k in ('a', 'b', 'c'):\n"
        "    kv.init(k, np.zeros(4, np.float32))\n"
        "    kv.push(k, np.ones(4, np.float32))\n"
        "    outs.append(np.zeros(4, np.float32))\n"
        "    kv.pull(k, outs[-1])\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    kv.wait_all()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    os._exit(3)\n")
    assert (rc, rest) == (3, "interrupted")
    assert seconds < 30


def test_one_handle_serves_two_threads_in_turn():
    rounds = 300
    with actorps.KVStore.create("local", num_shards=2) as kv:
        kv.init("a", np.zeros(100, np.float32))
        kv.init("b", np.zeros(100, np.float32))
        kv.set_optimizer("accumulate")
        errors = []

        def train(key):
            try:
                out = np.zeros(100, np.float32)
                for r in range(rounds):
                    kv.push(key, np.ones(100, np.float32))
                    kv.wait(kv.pull(key, out))
                    # Only this thread pushes `key`: every push is in.
                    assert out[0] == r + 1
            except Exception as e:  # reported to the main thread
                errors.append(e)

        threads = [threading.Thread(target=train, args=(k,))
                   for k in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors


def test_commands_compression_and_heartbeat_options():
    seen = []

    def on_command(head, body):
        seen.append((head, body))
        if body == "fail":
            raise RuntimeError("this shard says no")

    with actorps.KVStore.create("local", num_shards=2, heartbeat=0,
                                on_command=on_command) as kv:
        kv.send_command_to_servers(7, "hello")
        # Every shard ran it once.
        assert seen == [(7, "hello"), (7, "hello")]
        with pytest.raises(actorps.BadConfig, match="this shard says no"):
            kv.send_command_to_servers(7, "fail")
        kv.init("w", np.zeros(3, np.float32))
        kv.set_optimizer("accumulate")
        # 2-bit: each gradient becomes +-threshold or 0 on the way.
        kv.set_gradient_compression("2bit:0.5")
        kv.push("w", f32(1.0, 0.2, -0.7))
        out = np.zeros(3, np.float32)
        kv.wait(kv.pull("w", out))
        assert np.array_equal(out, f32(0.5, 0, -0.5))
        with pytest.raises(ValueError, match="2bit"):
            kv.set_gradient_compression("3bit")
    with pytest.raises(TypeError, match="on_command"):
        actorps.KVStore.create("local", on_command=3)
    # A handler that calls its own store fails the command at once instead
    # of waiting for itself.
    stores = []

    def reentrant(head, body):
        stores[0].barrier()

    with actorps.KVStore.create("local", on_command=reentrant,
                                timeout=60) as kv:
        stores.append(kv)
        with pytest.raises(actorps.BadConfig, match="must not call the store"):
            kv.send_command_to_servers(5, "x")
    with pytest.raises(ValueError, match="heartbeat"):
        actorps.KVStore.create("local", heartbeat=-1)


def test_a_killed_server_fails_data_calls_with_dead_node(job_factory):
    job = job_factory("dist_async", 1, log_level="debug")
    kv = actorps.KVStore.create("dist_async", coordinator=job.address,
                                token=job.token, timeout=20)
    kv.init("w", f32(1, 2))
    out = np.zeros(2, np.float32)
    kv.wait(kv.pull("w", out))
    assert np.array_equal(out, f32(1, 2))
    job.server.proc.kill()
    job.server.proc.wait()
    with pytest.raises(actorps.DeadNode):
        kv.push("w", f32(1, 1))
        kv.wait(kv.pull("w", out))
    # The worker may see the death on its data channel before the
    # coordinator sees the server's connection drop: the coordinator counts
    # the server dead before it logs (at debug level) that it is down.
    job.coordinator.wait_for(r"server 0 \(node \d+\) is down", 30)
    assert kv.num_dead_node(actorps.SERVERS, 5) == 1
    kv.set_barrier_before_exit(False)
    try:
        kv.close()
    except actorps.Error:
        pass  # the server's leave may fail: it is gone
    assert kv.closed


def test_a_failed_init_of_rank_0_is_not_initialized_for_the_others(
        job_factory):
    job = job_factory("dist_sync", 2)
    kv0 = actorps.KVStore.create("dist_sync", coordinator=job.address,
                                 token=job.token, timeout=10)
    kv1 = actorps.KVStore.create("dist_sync", coordinator=job.address,
                                 token=job.token, timeout=10)
    assert (kv0.rank, kv1.rank) == (0, 1)
    errors = []
    declared = threading.Event()

    def rank_1():
        try:
            declared.set()
            kv1.init("w", np.zeros(4, np.float32))  # waits for rank 0
        except Exception as e:  # reported to the main thread
            errors.append(e)

    t = threading.Thread(target=rank_1)
    t.start()
    declared.wait(10)
    # Once rank 1 declared the key, asking for its shape says it is not
    # initialized yet (before: unknown).
    deadline = time.monotonic() + 30
    while True:
        try:
            kv0.shape("w")
        except actorps.NotInitialized:
            break
        except actorps.UnknownKey:
            assert time.monotonic() < deadline
    # Rank 0's init cannot reach the dead server: it fails, and so does the
    # init rank 1 waits in.
    job.server.proc.kill()
    job.server.proc.wait()
    with pytest.raises(actorps.DeadNode):
        kv0.init("w", np.zeros(4, np.float32))
    t.join(60)
    assert not t.is_alive()
    assert len(errors) == 1
    assert isinstance(errors[0], actorps.NotInitialized), errors
    for kv in (kv0, kv1):
        kv.set_barrier_before_exit(False)
        try:
            kv.close()
        except actorps.Error:
            pass  # the server is gone


def test_export_weights_writes_safetensors_with_shapes(tmp_path):
    import json
    import struct
    path = str(tmp_path / "model.safetensors")
    # Keys sliced over shards, and one of a single float.
    with actorps.KVStore.create("local", num_shards=3, bigarray_bound=10,
                                slice_floats=7) as kv:
        w = np.arange(24, dtype=np.float32).reshape(4, 6)
        kv.init("layer1.weight", w)
        kv.init("bias", f32(0.5))
        kv.init(7, np.ones((2, 2, 2), np.float32))
        kv.set_optimizer("sgd", learning_rate=0.5, momentum=0.9)
        kv.push("layer1.weight", np.ones((4, 6), np.float32))
        kv.export_weights(path, optimizer_state=True)
        got = np.zeros((4, 6), np.float32)
        kv.wait(kv.pull("layer1.weight", got))
    # The format itself, read with json and struct only.
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    assert (8 + n) % 8 == 0
    assert header["__metadata__"]["optimizer"] == "sgd"
    entry = header["layer1.weight"]
    assert entry["dtype"] == "F32" and entry["shape"] == [4, 6]
    begin, end = entry["data_offsets"]
    values = struct.unpack("<24f", data[begin:end])
    assert values == tuple(got.ravel().tolist())
    # Every byte of the data belongs to one tensor.
    spans = sorted(tuple(t["data_offsets"]) for k, t in header.items()
                   if k != "__metadata__")
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    # And through the package's reader.
    tensors, meta = actorps.load_safetensors(path)
    assert np.array_equal(tensors["layer1.weight"], got)
    assert tensors["bias"].shape == (1,) and tensors["bias"][0] == 0.5
    assert tensors["7"].shape == (2, 2, 2)
    # SGD with momentum: one state block, the momentum lr * grad.
    momentum = tensors["__optimizer__/layer1.weight/0"]
    assert momentum.shape == (4, 6)
    assert np.allclose(np.abs(momentum), 0.5)
    assert "__optimizer__/layer1.weight/1" not in tensors
    state_dict = {k: torch.from_numpy(v) for k, v in tensors.items()
                  if not k.startswith("__optimizer__/")}
    assert torch.equal(state_dict["layer1.weight"], torch.from_numpy(got))


def test_plot_draws_every_run_with_axes_markers_and_a_legend(tmp_path):
    import subprocess
    import sys
    from actorps import plot
    runs = []
    for name, epochs in (("async", 3), ("sync", 2)):
        path = tmp_path / f"{name}.csv"
        lines = ["epoch,train_loss,test_accuracy,samples_per_s,seconds"]
        lines += [f"{e},{1.0 / e},{0.5 + 0.1 * e},1000,{2.0 * e}"
                  for e in range(1, epochs + 1)]
        path.write_text("\n".join(lines) + "\n")
        runs.append((name, str(path)))
    # The async run has a per-step file too: 5 steps per epoch.
    steps = ["step,epoch,train_loss,seconds"]
    steps += [f"{s},{(s - 1) // 5 + 1},{2.0 / s},{0.4 * s}"
              for s in range(1, 16)]
    (tmp_path / "async-steps.csv").write_text("\n".join(steps) + "\n")
    stem = str(tmp_path / "plots" / "curves")
    paths, points = plot.plot(runs, stem)
    assert paths == [stem + ".png", stem + ".svg"]
    with open(paths[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # 4 panels (loss and accuracy, against epochs and wall time), each with
    # both runs: 3 + 2 markers per panel.
    assert points[("async", "epoch", "train_loss")] == 3
    assert points[("sync", "wall", "test_accuracy")] == 2
    assert points[("async", "step", "train_loss")] == 15
    assert ("sync", "step", "train_loss") not in points
    # In the SVG, each run's line in each panel is a group of one marker
    # per point.
    import xml.etree.ElementTree as ET
    ns = "{http://www.w3.org/2000/svg}"
    markers = {}
    for g in ET.parse(paths[1]).getroot().iter(ns + "g"):
        gid = g.get("id", "")
        if gid.startswith("run:"):
            markers[gid] = len(list(g.iter(ns + "use")))
    assert len(markers) == 4 * 2
    for gid, n in markers.items():
        assert n == (3 if gid.startswith("run:async:") else 2), gid
    # The command line: labels from the file names, exit 0; a CSV that is
    # not one of actorps-train's is refused with exit 2.
    cli = subprocess.run([sys.executable, "-m", "actorps.plot", runs[0][1],
                          "--out", str(tmp_path / "cli")],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "cli.png").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    cli = subprocess.run([sys.executable, "-m", "actorps.plot", str(bad)],
                         capture_output=True, text=True)
    assert cli.returncode == 2 and "no column" in cli.stderr


def test_metrics_port_serves_the_store_counters():
    import re
    import urllib.request
    with actorps.KVStore.create("local", num_shards=2,
                                metrics_port=0) as kv:
        assert kv.metrics_port > 0
        kv.init("w", np.zeros(100, np.float32))
        for _ in range(3):
            kv.push("w", np.ones(100, np.float32))
        out = np.zeros(100, np.float32)
        kv.wait(kv.pull("w", out))
        url = f"http://127.0.0.1:{kv.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()

        def value(sample):
            m = re.search("^" + re.escape(sample) + r" (\S+)$", text, re.M)
            assert m, sample
            return float(m.group(1))
        assert value('actorps_worker_operations_total{op="push",'
                     'worker="0"}') == 3
        assert value("actorps_shard_pushes_total") == 3
        assert value('actorps_shard_bytes_total{direction="push"}') == 1200
    with actorps.KVStore.create("local") as kv:
        assert kv.metrics_port == 0
    with pytest.raises(ValueError, match="metrics_port"):
        actorps.KVStore.create("local", metrics_port=70000)


def test_ssp_store_bounds_staleness_and_sums_exactly():
    import threading
    with actorps.KVStore.create("local_ssp", num_workers=2,
                                staleness=1) as kv:
        assert kv.type == "local_ssp" and kv.staleness == 1
        assert not kv.synchronous
        kv.set_optimizer("accumulate")
        kv.init("w", np.zeros(2, np.float32))
        handles = [kv, kv.worker(1)]
        seen = [[], []]

        def run(h):
            out = np.zeros(2, np.float32)
            for _ in range(20):
                h.push("w", np.full(2, h.rank + 1, np.float32))
                h.wait(h.pull("w", out))
                seen[h.rank].append(float(out[0]))
            h.barrier()

        threads = [threading.Thread(target=run, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # After k pushes, every worker's first k - 1 pushes (3 each step)
        # are in.
        for r in range(2):
            for k, v in enumerate(seen[r], start=1):
                assert v >= 3 * (k - 1), (r, k, v)
        out = np.zeros(2, np.float32)
        kv.wait(kv.pull("w", out))
        assert list(out) == [60.0, 60.0]
    with actorps.KVStore.create("local") as kv:
        assert kv.staleness == -1
        assert kv.transport == "local"
    with pytest.raises(ValueError, match="dist stores only"):
        actorps.KVStore.create("local", transport="ucx")
    with pytest.raises(ValueError, match="staleness"):
        actorps.KVStore.create("local_ssp", staleness=-1)


def test_clear_pending_drops_an_unfinished_sync_round():
    import threading
    with actorps.KVStore.create("local_sync", num_workers=2) as kv:
        kv.set_optimizer("accumulate")
        kv.init("w", np.zeros(1, np.float32))
        w1 = kv.worker(1)
        # Worker 0 pushes into round 0; worker 1 never does: dropped.
        kv.push("w", f32(5.0))
        kv.wait_all()
        kv.clear_pending()
        out = np.zeros(1, np.float32)
        kv.wait(kv.pull("w", out))
        assert out[0] == 0.0
        # The round starts anew: both push, the sum is applied once.
        done = threading.Event()

        def other():
            w1.push("w", f32(2.0))
            w1.wait_all()
            done.set()

        t = threading.Thread(target=other)
        t.start()
        kv.push("w", f32(1.0))
        kv.wait(kv.pull("w", out))
        t.join()
        assert done.is_set()
        assert out[0] == 3.0


def test_row_tables_push_and_pull_rows_with_numpy_ids():
    with actorps.KVStore.create("local", num_shards=3) as kv:
        kv.set_optimizer("sgd", learning_rate=1.0)
        kv.init_table("emb", 100, 4, fill="uniform", low=-1.0, high=1.0,
                      seed=3)
        ids = np.array([42, 7, 42], dtype=np.int64)
        before = np.zeros((3, 4), np.float32)
        kv.wait(kv.pull_rows("emb", ids, before))
        assert (before[0] == before[2]).all()
        assert ((before >= -1) & (before < 1)).all()
        grads = np.ones((3, 4), np.float32)
        kv.push_rows("emb", ids, grads)
        after = np.zeros((2, 4), np.float32)
        kv.wait(kv.pull_rows("emb", [42, 7], after))
        # Row 42 was named twice: its two rows of ones were summed.
        np.testing.assert_allclose(after[0], before[0] - 2, rtol=1e-6)
        np.testing.assert_allclose(after[1], before[1] - 1, rtol=1e-6)
        with pytest.raises(ValueError, match="negative"):
            kv.pull_rows("emb", [-1], np.zeros(4, np.float32))
        with pytest.raises(LookupError, match="out of range"):
            kv.wait(kv.pull_rows("emb", [100], np.zeros(4, np.float32)))
        with pytest.raises(ValueError, match="one row per id|need"):
            kv.pull_rows("emb", [1, 2], np.zeros(4, np.float32))
        with pytest.raises(ValueError, match="fill"):
            kv.init_table("t2", 5, 2, fill="normal")

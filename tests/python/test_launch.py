# SPDX-License-Identifier: BSD-3-Clause
"""actorps-launch (python3 -m actorps.launch) and dead workers seen from
Python."""

import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import actorps

BIN_DIR = os.path.dirname(os.environ["ACTORPS_COORDINATOR_BIN"])

WORKER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import actorps
    rounds = int(sys.argv[1])
    with actorps.KVStore.create("dist") as kv:
        assert kv.type == os.environ["ACTORPS_MODE"]
        assert kv.num_workers == int(os.environ["ACTORPS_NUM_WORKERS"])
        kv.init("w", np.zeros(1000, np.float32))
        if kv.rank == 0:
            kv.set_optimizer("accumulate")
        kv.barrier()
        grad = np.full(1000, kv.rank + 1, np.float32)
        out = np.zeros(1000, np.float32)
        for _ in range(rounds):
            kv.push("w", grad)
            kv.wait(kv.pull("w", out))
        assert (out == out[0]).all()
        print("rank", kv.rank, "holds", int(out[0]), flush=True)
""")


def launch(tmp_path, *args, timeout=180):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ)
    env.pop("ACTORPS_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "actorps.launch", "--bin-dir", BIN_DIR, *args,
         "--", sys.executable, str(script), "10"],
        env=env, capture_output=True, text=True, timeout=timeout)


def test_launch_runs_a_sync_job_with_exact_sums(tmp_path):
    run = launch(tmp_path, "--workers", "3", "--servers", "1",
                 "--mode", "dist_sync")
    assert run.returncode == 0, run.stdout + run.stderr
    held = re.findall(r"^\[worker (\d)\] rank (\d) holds (\d+)$", run.stdout,
                      re.M)
    assert sorted(r for _, r, _ in held) == ["0", "1", "2"], run.stdout
    # 10 sync rounds of 1 + 2 + 3.
    assert all(int(v) == 60 for _, _, v in held), run.stdout
    assert "[coordinator]" in run.stdout and "[server 0]" in run.stdout


def test_launch_stops_the_job_when_a_worker_fails(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import sys; print('giving up'); sys.exit(7)\n")
    env = dict(os.environ)
    run = subprocess.run(
        [sys.executable, "-m", "actorps.launch", "--bin-dir", BIN_DIR,
         "--workers", "2", "--", sys.executable, str(script)],
        env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 7, run.stdout + run.stderr
    assert "exited with code 7: stopping the job" in run.stdout


def test_launch_refuses_bad_flags():
    run = subprocess.run([sys.executable, "-m", "actorps.launch",
                          "--workers", "0", "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--workers" in run.stderr
    run = subprocess.run([sys.executable, "-m", "actorps.launch"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "no worker command" in run.stderr


def test_a_killed_worker_is_counted_by_num_dead_node(job_factory):
    job = job_factory("dist_async", 2)
    victim = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, signal, numpy as np, actorps
            kv = actorps.KVStore.create("dist_async",
                                        coordinator="{job.address}",
                                        token="{job.token}")
            kv.init("w", np.zeros(4, np.float32))
            # A pull answered: its data connections are up both ways (UCX
            # 1.13 can abort a server whose peer dies while they are being
            # set up: README, known defects).
            out = np.zeros(4, np.float32)
            kv.wait(kv.pull("w", out))
            print("joined", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        """)], stdout=subprocess.PIPE, text=True)
    with actorps.KVStore.create("dist_async", coordinator=job.address,
                                token=job.token) as kv:
        # A worker that asks for another transport than the job's is
        # refused (before it takes a rank).
        assert kv.transport in ("caf", "ucx")
        other = "caf" if kv.transport == "ucx" else "ucx"
        with pytest.raises(ValueError, match="the node asked for " + other):
            actorps.KVStore.create("dist_async", coordinator=job.address,
                                   token=job.token, transport=other)
        kv.init("w", np.zeros(4, np.float32))
        assert victim.stdout.readline().strip() == "joined"
        assert victim.wait(60) == -9
        # The coordinator sees the node go down; num_dead_node answers from
        # its record (bounded wait: the down message crosses processes).
        seen = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = kv.num_dead_node(actorps.WORKERS)
            if seen == 1:
                break
        logs = ("server:\n" + "".join(job.server.output)
                + "coordinator:\n" + "".join(job.coordinator.output))
        assert seen == 1, logs
        assert kv.num_dead_node(actorps.SERVERS) == 0, logs
        kv.set_barrier_before_exit(False)


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "pytorch_fashion_mnist.py")


def test_the_pytorch_example_learns_under_the_launcher():
    if not os.path.exists("/usr/share/datasets/fashion-mnist"):
        import pytest
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    run = subprocess.run(
        [sys.executable, "-m", "actorps.launch", "--bin-dir", BIN_DIR,
         "--workers", "2", "--mode", "dist_sync", "--", sys.executable,
         EXAMPLE, "--epochs", "1", "--limit-train", "3000", "--limit-test",
         "1000"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    m = re.search(r"\[worker \d\] dist_sync rank 0 of 2: epoch 1/1: .*"
                  r"test accuracy ([0-9.]+)", run.stdout)
    assert m, run.stdout
    # Ten classes: chance is 0.1; one epoch on 3000 images reaches ~0.65.
    assert float(m.group(1)) > 0.4, run.stdout


def test_slurm_tasks_share_one_job(tmp_path):
    import socket
    # Two Slurm tasks on this machine: task 0 runs the coordinator on the
    # node list's first host, each task its share of servers and workers.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    tasks = []
    for task in range(2):
        env = dict(os.environ, SLURM_PROCID=str(task), SLURM_NTASKS="2",
                   SLURM_JOB_NODELIST="127.0.0.1", SLURMD_NODENAME="127.0.0.1",
                   ACTORPS_TOKEN="slurm-test-token")
        tasks.append(subprocess.Popen(
            [sys.executable, "-m", "actorps.launch", "--bin-dir", BIN_DIR,
             "--slurm", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "2", "--servers", "2", "--mode", "dist_sync", "--",
             sys.executable, str(script), "10"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    outs = [t.communicate(timeout=180)[0] for t in tasks]
    assert [t.returncode for t in tasks] == [0, 0], outs
    assert "[coordinator]" in outs[0] and "[coordinator]" not in outs[1]
    # Task 0 runs server 0 and worker 0, task 1 server 1 and worker 1.
    assert "[worker 0]" in outs[0] and "[worker 1]" in outs[1], outs
    held = re.findall(r"rank \d holds (\d+)", outs[0] + outs[1])
    assert held == ["30", "30"], outs  # 10 sync rounds of 1 + 2


def test_slurm_mode_needs_slurm_and_a_token():
    env = dict(os.environ)
    for k in ("SLURM_PROCID", "SLURM_NTASKS", "ACTORPS_TOKEN"):
        env.pop(k, None)
    run = subprocess.run([sys.executable, "-m", "actorps.launch", "--bin-dir",
                          BIN_DIR, "--slurm", "--", "true"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "SLURM_PROCID" in run.stderr
    env.update(SLURM_PROCID="0", SLURM_NTASKS="1",
               SLURM_JOB_NODELIST="127.0.0.1")
    run = subprocess.run([sys.executable, "-m", "actorps.launch", "--bin-dir",
                          BIN_DIR, "--slurm", "--", "true"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "ACTORPS_TOKEN" in run.stderr


def test_slurm_node_lists_expand():
    from actorps.launch import _expand_nodelist
    import shutil
    if shutil.which("scontrol"):
        import pytest
        pytest.skip("scontrol expands the list here")
    assert _expand_nodelist("n[01-03,07],gpu5") == ["n01", "n02", "n03",
                                                    "n07", "gpu5"]
    assert _expand_nodelist("a,b") == ["a", "b"]


def test_hosts_over_ssh_share_one_job(tmp_path):
    # A stand-in for ssh that runs the command here and notes each call.
    calls = tmp_path / "calls"
    fake = tmp_path / "fake-ssh"
    fake.write_text("#!/bin/sh\n"
                    f"printf '%s %s\\n' \"$1\" \"$2\" >> {calls}\n"
                    "exec sh -c \"$2\"\n")
    fake.chmod(0o755)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, ACTORPS_TOKEN="ssh-test-token")
    run = subprocess.run(
        [sys.executable, "-m", "actorps.launch", "--bin-dir", BIN_DIR,
         "--hosts", "127.0.0.1,127.0.0.1", "--ssh", str(fake),
         "--workers", "2", "--servers", "2", "--mode", "dist_sync", "--",
         sys.executable, str(script), "10"],
        env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    held = re.findall(r"^\[worker \d@127\.0\.0\.1\] rank \d holds (\d+)$",
                      run.stdout, re.M)
    assert held == ["30", "30"], run.stdout
    lines = calls.read_text().splitlines()
    assert len(lines) == 4  # 2 servers and 2 workers went through ssh
    # The token went over ssh's input, never on a command line.
    assert all("ssh-test-token" not in line for line in lines)


def test_ctrl_c_or_sigterm_stops_every_process_of_the_job(tmp_path):
    import signal
    script = tmp_path / "idle.py"
    # A worker that joins the job, says so and waits at a barrier that
    # never opens (the job has 2 workers): only the launcher can end it.
    script.write_text(textwrap.dedent("""
        import os
        import actorps
        kv = actorps.KVStore.create("dist", barrier_timeout=600)
        print("pid", os.getpid(), flush=True)
        kv.barrier()
    """))
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        env = dict(os.environ)
        env.pop("ACTORPS_TOKEN", None)
        p = subprocess.Popen(
            [sys.executable, "-m", "actorps.launch", "--bin-dir", BIN_DIR,
             "--workers", "2", "--mode", "dist_sync", "--",
             sys.executable, str(script)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        try:
            pids = []
            lines = []
            while len(pids) < 2:
                line = p.stdout.readline()
                assert line, "".join(lines)
                lines.append(line)
                m = re.search(r"\] pid (\d+)$", line)
                if m:
                    pids.append(int(m.group(1)))
            p.send_signal(sig)
            assert p.wait(60) == code, "".join(lines) + p.stdout.read()
        finally:
            if p.poll() is None:
                p.kill()
        # The launcher waited for its workers: they are gone.
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            assert not alive, pid

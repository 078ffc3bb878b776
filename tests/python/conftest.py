# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures of the Python tests: the apps' paths come from ctest's
environment (ACTORPS_COORDINATOR_BIN, ACTORPS_SERVER_BIN), the package from
PYTHONPATH (the build tree's python/ folder)."""

import os
import queue
import re
import subprocess
import threading

import pytest


class App:
    """A running app whose output lines a thread collects."""

    def __init__(self, args, env):
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = queue.Queue()
        self.output = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern, seconds=30):
        """The first match of `pattern` in a line, waiting up to `seconds`."""
        while True:
            line = self.lines.get(timeout=seconds)
            if line is None:
                raise RuntimeError("exited before printing " + pattern + ": "
                                   + "".join(self.output))
            m = re.search(pattern, line)
            if m:
                return m

    def stop(self, seconds=60):
        """Waits for the exit (kills after `seconds`); the exit code."""
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


class Job:
    """A coordinator and one server on 127.0.0.1, as the apps run them."""

    def __init__(self, mode, workers, token, shards=2, log_level="info"):
        self.token = token
        env = dict(os.environ, ACTORPS_TOKEN=token)
        self.coordinator = App(
            [os.environ["ACTORPS_COORDINATOR_BIN"], "--host", "127.0.0.1",
             "--port", "0", "--mode", mode, "--workers", str(workers),
             "--servers", "1", "--log-level", log_level], env)
        m = self.coordinator.wait_for(r"listening on (127\.0\.0\.1:\d+)")
        self.address = m.group(1)
        self.server = App(
            [os.environ["ACTORPS_SERVER_BIN"], "--coordinator", self.address,
             "--host", "127.0.0.1", "--shards", str(shards)], env)

    def kill(self):
        for app in (self.server, self.coordinator):
            if app.proc.poll() is None:
                app.proc.kill()
                app.proc.wait()


@pytest.fixture
def job_factory():
    jobs = []

    def make(mode, workers, token="py-token", shards=2, log_level="info"):
        job = Job(mode, workers, token, shards, log_level)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.kill()

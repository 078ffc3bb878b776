# SPDX-License-Identifier: BSD-3-Clause
"""What the Python module adds to a push+pull round, against the same round
from C++ in the same run.

    PYTHONPATH=build/python python3 bench/python_overhead.py [--runs 5]

Each run measures, back to back, a split round (push, wait, pull, wait)
of one key in a local store (1 worker, 2 shards) from Python on a numpy
array and from C++ (build/bench/actorps-bench --modes local), at 4 KB and
4 MB, and prints the median round of each and their difference; then the
medians over the runs.
"""

import argparse
import os
import re
import statistics
import subprocess
import time

import numpy as np

import actorps

HERE = os.path.dirname(os.path.abspath(__file__))


def python_round_us(floats, warmup, rounds):
    with actorps.KVStore.create("local", num_shards=2) as kv:
        kv.init("k", np.zeros(floats, np.float32))
        grad = np.ones(floats, np.float32)
        out = np.zeros(floats, np.float32)
        times = []
        for r in range(warmup + rounds):
            start = time.perf_counter()
            # As actorps-bench's split round: push, wait, pull, wait.
            kv.push("k", grad)
            kv.wait_all()
            kv.wait(kv.pull("k", out))
            if r >= warmup:
                times.append((time.perf_counter() - start) * 1e6)
        return statistics.median(times)


def cpp_round_us(bench, warmup, rounds):
    out = subprocess.run(
        [bench, "--modes", "local", "--no-limits", "--sizes", "4K,4M",
         "--many", "none", "--round", "split", "--workers", "1",
         "--backlog", "0", "--compression", "none", "--warmup", str(warmup),
         "--rounds", str(rounds), "--shards", "2"],
        capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        m = re.match(r"local\s+(4 KB|4 MB)\s+split\s+1\s+([0-9.]+)", line)
        if m:
            got[m.group(1)] = float(m.group(2))
    return got


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--bench", default=os.path.join(HERE, "..", "build",
                                                   "bench", "actorps-bench"))
    args = p.parse_args()
    sizes = {"4 KB": 1024, "4 MB": 1 << 20}
    rows = {name: ([], []) for name in sizes}
    for run in range(args.runs):
        cpp = cpp_round_us(args.bench, args.warmup, args.rounds)
        for name, floats in sizes.items():
            py = python_round_us(floats, args.warmup, args.rounds)
            rows[name][0].append(py)
            rows[name][1].append(cpp[name])
            print(f"run {run + 1}: {name}: python {py:.1f} us, "
                  f"c++ {cpp[name]:.1f} us", flush=True)
    print("| size | python us | c++ us | python - c++ us | python / c++ |")
    print("|---|---|---|---|---|")
    for name, (py, cpp) in rows.items():
        diffs = [a - b for a, b in zip(py, cpp)]
        ratios = [a / b for a, b in zip(py, cpp)]
        print(f"| {name} | {statistics.median(py):.1f} | "
              f"{statistics.median(cpp):.1f} | {statistics.median(diffs):.1f} "
              f"| {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()

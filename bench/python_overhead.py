# SPDX-License-Identifier: BSD-3-Clause
"""What the Python module adds to a push+pull round, against the same round
driven from C++ on the same store in the same process.

    PYTHONPATH=build/python python3 bench/python_overhead.py [--runs 5]

Each run makes a local store (1 worker, 2 shards) per size (4 KB and
4 MB) and times, in alternating blocks, a split round (push, wait, pull,
wait) of one key from Python on numpy arrays and the same round from C++
(the module's _cpp_round_us, a loop over the C++ facade on the same
handle); it prints each block's median round and, at the end, the medians
over the runs of each side and of their per-run difference and ratio.
"""

import argparse
import statistics
import time

import numpy as np

import actorps


def python_round_us(kv, floats, warmup, rounds):
    grad = np.ones(floats, np.float32)
    out = np.zeros(floats, np.float32)
    times = []
    for r in range(warmup + rounds):
        start = time.perf_counter()
        # As the C++ loop: push, wait, pull, wait.
        kv.push("k", grad)
        kv.wait_all()
        kv.wait(kv.pull("k", out))
        if r >= warmup:
            times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--blocks", type=int, default=3,
                   help="alternating Python/C++ blocks per run")
    args = p.parse_args()
    sizes = {"4 KB": 1024, "4 MB": 1 << 20}
    rows = {name: ([], []) for name in sizes}
    for run in range(args.runs):
        for name, floats in sizes.items():
            with actorps.KVStore.create("local", num_shards=2) as kv:
                kv.init("k", np.zeros(floats, np.float32))
                py, cpp = [], []
                for _ in range(args.blocks):
                    py.append(python_round_us(kv, floats, args.warmup,
                                              args.rounds))
                    cpp.append(kv._cpp_round_us("k", args.warmup,
                                                args.rounds))
                py, cpp = statistics.median(py), statistics.median(cpp)
            rows[name][0].append(py)
            rows[name][1].append(cpp)
            print(f"run {run + 1}: {name}: python {py:.1f} us, "
                  f"c++ {cpp:.1f} us", flush=True)
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

# SPDX-License-Identifier: BSD-3-Clause
"""Training curves people read: loss and test accuracy against epochs and
against wall time, with axes, ticks, markers and a legend, several runs
overlaid, as PNG and SVG (matplotlib, Debian's python3-matplotlib).

    python3 -m actorps.plot out/async.csv out/sync.csv out/baseline.csv \\
        --out out/curves

reads the per-epoch CSV files that actorps-train (and the dist --job mnist
worker) write (epoch,train_loss,test_accuracy,samples_per_s,seconds) and
writes out/curves.png and out/curves.svg. Each run's label is its file's
name without .csv, or LABEL=PATH. Where a run's per-step file
(RUN-steps.csv: step,epoch,train_loss,seconds) lies next to it, the loss
against wall time also shows every step's batch loss, faint.
"""

import argparse
import csv
import os
import sys


def read_run(path):
    """The epochs of one CSV file: a dict of column lists (floats)."""
    cols = {"epoch": [], "train_loss": [], "test_accuracy": [],
            "seconds": []}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for k in cols:
                if k not in row:
                    raise ValueError(f"{path}: no column {k!r} (an "
                                     "actorps-train CSV has epoch, "
                                     "train_loss, test_accuracy, "
                                     "samples_per_s, seconds)")
                cols[k].append(float(row[k]))
    if not cols["epoch"]:
        raise ValueError(f"{path}: no epochs")
    # Wall time at the end of each epoch.
    total, wall = 0.0, []
    for s in cols["seconds"]:
        total += s
        wall.append(total)
    cols["wall"] = wall
    return cols


def read_steps(path):
    """The per-step file next to an epoch CSV (RUN-steps.csv, written by
    actorps-train and the dist mnist worker): (wall times, losses), or None
    if there is none."""
    steps = os.path.splitext(path)[0] + "-steps.csv"
    if not os.path.exists(steps):
        return None
    wall, loss = [], []
    with open(steps, newline="") as f:
        for row in csv.DictReader(f):
            wall.append(float(row["seconds"]))
            loss.append(float(row["train_loss"]))
    return wall, loss


def plot(runs, out_stem, title="actorps training"):
    """Draws `runs` (a list of (label, path)) into OUT_STEM.png and .svg;
    returns the two paths and the points drawn per run and panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [(label, read_run(path)) for label, path in runs]
    steps = {label: read_steps(path) for label, path in runs}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
    panels = [(axes[0][0], "epoch", "train_loss", "epoch", "training loss"),
              (axes[0][1], "epoch", "test_accuracy", "epoch",
               "test accuracy"),
              (axes[1][0], "wall", "train_loss", "wall time (s)",
               "training loss"),
              (axes[1][1], "wall", "test_accuracy", "wall time (s)",
               "test accuracy")]
    markers = "osD^v<>ph*"
    points = {}
    for ax, x, y, xlabel, ylabel in panels:
        for i, (label, cols) in enumerate(data):
            if x == "wall" and y == "train_loss" and steps[label]:
                # Each step's batch loss, faint, under the epoch means.
                (faint,) = ax.plot(*steps[label], linewidth=0.5, alpha=0.3,
                                   color=f"C{i}")
                faint.set_gid(f"steps:{label}")
                points[(label, "step", "train_loss")] = len(steps[label][0])
            (line,) = ax.plot(cols[x], cols[y], color=f"C{i}",
                              marker=markers[i % len(markers)], label=label)
            # Names the line's group in the SVG (tests count its markers).
            line.set_gid(f"run:{label}:{x}:{y}")
            points[(label, x, y)] = len(cols[x])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    for ax in (axes[0][0], axes[0][1]):
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(title)
    folder = os.path.dirname(out_stem)
    if folder:
        os.makedirs(folder, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = f"{out_stem}.{ext}"
        fig.savefig(path, dpi=100)
        paths.append(path)
    plt.close(fig)
    return paths, points


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m actorps.plot",
        description="Draws actorps-train's per-epoch CSV files (loss and "
                    "accuracy against epochs and wall time) as PNG and SVG.")
    p.add_argument("csv", nargs="+", help="CSV files, or LABEL=PATH")
    p.add_argument("--out", default="curves",
                   help="output path without extension (default: curves)")
    p.add_argument("--title", default="actorps training")
    args = p.parse_args(argv)
    runs = []
    for item in args.csv:
        label, sep, path = item.partition("=")
        if not sep:
            path = item
            label = os.path.splitext(os.path.basename(item))[0]
        runs.append((label, path))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("actorps.plot: matplotlib is not installed (Debian: "
              "python3-matplotlib)", file=sys.stderr)
        return 2
    try:
        paths, _ = plot(runs, args.out, args.title)
    except (OSError, ValueError) as e:
        print(f"actorps.plot: {e}", file=sys.stderr)
        return 2
    print("curves: " + " and ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())

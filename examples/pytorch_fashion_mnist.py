# SPDX-License-Identifier: BSD-3-Clause
"""A PyTorch model on Fashion-MNIST, trained data-parallel through actorps.

Data-parallel, 4 workers and 1 server on this machine:

    actorps-launch --workers 4 --mode dist_sync -- \\
        python3 examples/pytorch_fashion_mnist.py --epochs 3

The same model in one PyTorch process (no parameter server), to compare:

    python3 examples/pytorch_fashion_mnist.py --epochs 3

Under actorps-launch (ACTORPS_COORDINATOR set) each worker trains on its
share of the training set with a batch of --batch / workers, so the global
batch is --batch whatever the number of workers; the shards run SGD with
momentum on the summed gradients (sync) or on each gradient (async, with
the momentum lowered to max(0, 1 - workers x (1 - momentum))). Rank 0
prints the test accuracy and samples/s of each epoch. Data: Debian's
dataset-fashion-mnist.
"""

import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, kind, limit):
    prefix = "train" if kind == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(y.astype(np.int64))


def make_model(kind):
    if kind == "cnn":
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(32 * 7 * 7, 10))
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64,
                   help="global batch (split over the workers)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--data-dir", default=DATA)
    p.add_argument("--limit-train", type=int, default=0)
    p.add_argument("--limit-test", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.epochs < 1 or args.batch < 1 or args.lr <= 0:
        p.error("--epochs and --batch must be >= 1, --lr > 0")
    # Several workers share this machine's cores.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    x_train, y_train = load(args.data_dir, "train", args.limit_train)
    x_test, y_test = load(args.data_dir, "test", args.limit_test)
    model = make_model(args.model)
    loss_fn = torch.nn.CrossEntropyLoss()

    dist = "ACTORPS_COORDINATOR" in os.environ
    if dist:
        import actorps
        import actorps.torch
        kv = actorps.KVStore.create("dist")
        rank, workers = kv.rank, kv.num_workers
        # Sync: the shards sum the workers' batch means, 1/workers makes it
        # the global batch's mean. Async: each worker's gradient is applied
        # on its own, so 1/workers keeps the step per sample of one process;
        # asynchrony adds momentum of its own (Mitliagkas et al.,
        # "Asynchrony begets momentum"), so the shards run less of it, as
        # actorps-train does.
        momentum = args.momentum
        if not kv.synchronous:
            momentum = max(0.0, 1.0 - workers * (1.0 - momentum))
        trainer = actorps.torch.DistributedTrainer(
            model, kv, server_optimizer=("sgd", {
                "learning_rate": args.lr, "momentum": momentum,
                "rescale_grad": 1.0 / workers}))
        label = f"{kv.type} rank {rank} of {workers}"
    else:
        kv, rank, workers = None, 0, 1
        trainer = torch.optim.SGD(model.parameters(), lr=args.lr,
                                  momentum=args.momentum)
        label = "one process"
    batch = max(1, args.batch // workers)
    xs, ys = x_train[rank::workers], y_train[rank::workers]
    # Every worker runs the same number of steps (sync rounds need all).
    steps = len(x_train) // workers // batch
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(xs))
        start = time.monotonic()
        total = 0.0
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            trainer.zero_grad()
            loss = loss_fn(model(xs[idx]), ys[idx])
            loss.backward()
            trainer.step()
            total += loss.item()
        seconds = time.monotonic() - start
        if rank == 0:
            print(f"{label}: epoch {epoch}/{args.epochs}: loss "
                  f"{total / max(steps, 1):.4f}  test accuracy "
                  f"{accuracy(model, x_test, y_test):.4f}  "
                  f"{steps * batch * workers / seconds:.0f} samples/s  "
                  f"{seconds:.1f} s", flush=True)
    if kv is not None:
        trainer.close()
        kv.close()


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: BSD-3-Clause
"""actorps.torch.DistributedTrainer on a tiny model: loss falls and every
worker holds the same weights after a sync step."""

import threading

import pytest

import actorps

torch = pytest.importorskip("torch")
import actorps.torch  # noqa: E402  (needs torch)


def make_data(seed=0, n=256):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    return x, x @ w + 0.5


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1))


def full_loss(model, x, y):
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x), y).item()


def train_two_workers(kv_type, make_trainer, steps=60):
    x, y = make_data()
    kv0 = actorps.KVStore.create(kv_type, num_workers=2)
    kv1 = kv0.worker(1)
    models = [make_model(10), make_model(11)]
    start = full_loss(models[0], x, y)
    errors = []
    trainers = [None, None]

    def run(rank, kv):
        try:
            model = models[rank]
            trainer = make_trainer(model, kv)
            trainers[rank] = trainer
            # Each worker trains on its half of the data.
            xs, ys = x[rank::2], y[rank::2]
            for s in range(steps):
                i = (s * 16) % len(xs)
                trainer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(xs[i:i + 16]),
                                                    ys[i:i + 16])
                loss.backward()
                trainer.step()
            trainer.close()
        except Exception as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r, kv))
               for r, kv in enumerate((kv0, kv1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    end = [full_loss(m, x, y) for m in models]
    kv1.close()
    kv0.close()
    return start, end, models


def same_weights(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.parameters(),
                                                 b.parameters()))


def test_server_side_sgd_trains_and_keeps_workers_identical():
    start, end, models = train_two_workers(
        "local_sync",
        lambda model, kv: actorps.torch.DistributedTrainer(
            model, kv, server_optimizer=("sgd", {"learning_rate": 0.02})))
    assert end[0] < start / 4, (start, end)
    assert same_weights(*models)


def test_a_local_torch_optimizer_pushes_the_average_change():
    start, end, models = train_two_workers(
        "local_sync",
        lambda model, kv: actorps.torch.DistributedTrainer(
            model, kv,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.05)))
    assert end[0] < start / 4, (start, end)
    assert same_weights(*models)


def test_rank_0_values_win_and_first_layers_go_first():
    with actorps.KVStore.create("local") as kv:
        model = make_model(3)
        trainer = actorps.torch.DistributedTrainer(model, kv)
        keys = [k for k, _ in model.named_parameters()]
        priorities = [trainer._priority[k] for k in keys]
        assert priorities == sorted(priorities, reverse=True)
        out = torch.zeros_like(model[0].weight)
        kv.wait(kv.pull("0.weight", out))
        assert torch.equal(out, model[0].weight.data)
        trainer.close()


def test_refuses_parameters_it_cannot_carry():
    with actorps.KVStore.create("local") as kv:
        model = torch.nn.Linear(2, 2).double()
        with pytest.raises(TypeError, match="float32"):
            actorps.torch.DistributedTrainer(model, kv)

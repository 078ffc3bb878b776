# SPDX-License-Identifier: BSD-3-Clause
"""PyTorch models trained data-parallel through an actorps store.

    import actorps, actorps.torch
    kv = actorps.KVStore.create("dist")          # e.g. under actorps-launch
    trainer = actorps.torch.DistributedTrainer(
        model, kv, server_optimizer=("sgd", {"learning_rate": 0.05}))
    for x, y in batches:
        trainer.zero_grad()
        loss_fn(model(x), y).backward()          # gradients leave as computed
        trainer.step()                           # fresh weights come back

Every parameter is a key (its name in `model.named_parameters()`); rank 0's
initial values win and every worker starts from them. During `backward`, a
hook on each parameter pushes its gradient the moment it is complete, with
the priority of its layer: the first layers, which the next forward pass
needs first, go (and come back) first (P3's order). `step` pulls every
parameter's new value straight into its tensor and waits.

Two ways to update:
- server side (default): the shards run `server_optimizer` (any of the
  store's: sgd, nag, adagrad, adam, rmsprop, ... with their parameters) on
  the pushed gradients (summed over the workers of a sync round);
- local: give `optimizer=` a torch optimizer; `step` runs it, then pushes
  the change of each parameter divided by the number of workers, which the
  shards add to the stored value (so a sync round applies the workers'
  average step), and pulls the result.
"""

import torch

__all__ = ["DistributedTrainer"]


def _grad_accumulator(p):
    # The autograd node that accumulates into p.grad: its hook runs once the
    # gradient of p is complete for this backward pass (torch 1.13 has no
    # post-accumulate hook on tensors).
    return p.expand_as(p).grad_fn.next_functions[0][0]


class DistributedTrainer:
    """Pushes a model's gradients as backward produces them and pulls its
    weights back at `step`.

    model: a torch.nn.Module on the CPU with float32 parameters.
    kv: an actorps.KVStore handle (one per training process or thread).
    optimizer: a torch optimizer to step locally (then the change is
        pushed), or None for the shards' optimizer.
    server_optimizer: (name, params) set on the shards by rank 0 when
        `optimizer` is None.
    prefix: prepended to every key (several models in one store).
    """

    def __init__(self, model, kv, optimizer=None,
                 server_optimizer=("sgd", {"learning_rate": 0.01}),
                 prefix=""):
        self.model = model
        self.kv = kv
        self.optimizer = optimizer
        self._params = []
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            if p.device.type != "cpu" or p.dtype != torch.float32:
                raise TypeError(f"DistributedTrainer: parameter {name} must "
                                f"be float32 on the CPU, is {p.dtype} on "
                                f"{p.device}")
            self._params.append((prefix + name, p))
        n = len(self._params)
        # First layers first: the highest priority to the first parameter.
        self._priority = {key: n - i for i, (key, _) in
                          enumerate(self._params)}
        with torch.no_grad():
            for key, p in self._params:
                if not p.data.is_contiguous():
                    p.data = p.data.contiguous()
                kv.init(key, p.data)
        if optimizer is None:
            name, params = server_optimizer
            if kv.rank == 0:
                kv.set_optimizer(name, **params)
        else:
            # The shards add each pushed change to the stored value.
            if kv.rank == 0:
                kv.set_optimizer("accumulate")
        # Nobody pushes before the update rule is set; everyone starts from
        # rank 0's values.
        kv.barrier()
        self._pull_all()
        self._pushed = set()
        self._hooks = []
        self._accumulators = []
        if optimizer is None:
            for key, p in self._params:
                acc = _grad_accumulator(p)
                self._accumulators.append(acc)  # keeps the node alive
                self._hooks.append(acc.register_hook(self._make_hook(key, p)))

    def _make_hook(self, key, p):
        def hook(*_):
            # Runs inside backward once p.grad is complete: the push copies
            # it and returns at once.
            if p.grad is not None and key not in self._pushed:
                self.kv.push(key, p.grad.contiguous(),
                             priority=self._priority[key])
                self._pushed.add(key)
        return hook

    def _pull_all(self):
        for key, p in self._params:
            self.kv.pull(key, p.data, priority=self._priority[key])
        self.kv.wait_all()

    def zero_grad(self, set_to_none=False):
        """Clears the gradients (as torch.optim.Optimizer.zero_grad)."""
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=set_to_none)
            return
        for _, p in self._params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()

    def step(self):
        """Ends a training step: every worker's update reaches the store,
        and the model holds the new weights when this returns."""
        if self.optimizer is None:
            # A sync round needs every key from every worker: parameters
            # that got no gradient this step push zeros.
            for key, p in self._params:
                if key not in self._pushed:
                    zeros = torch.zeros_like(p.data)
                    self.kv.push(key, zeros, priority=self._priority[key])
            self._pushed.clear()
        else:
            before = [p.data.clone() for _, p in self._params]
            self.optimizer.step()
            workers = float(self.kv.num_workers)
            with torch.no_grad():
                for (key, p), old in zip(self._params, before):
                    change = (p.data - old) / workers
                    self.kv.push(key, change.contiguous(),
                                 priority=self._priority[key])
        self._pull_all()

    def close(self):
        """Removes the hooks (the store stays open)."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._accumulators.clear()

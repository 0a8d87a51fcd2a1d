"""Healthy MAML on sine regression: one backward per task into the meta-gradients, which are then divided by the meta-batch size.

The loop of learn2learn's MAML examples, with the MAML wrapper written out: each iteration
samples a meta-batch of 4 sine tasks (amplitude and phase drawn per task). For each, a learner
is cloned from the meta-model as a dict of parameters, adapted with one SGD step on 10
support points (``torch.autograd.grad(..., create_graph=True)``: second-order MAML), and its
query loss is backpropagated into the meta-model's gradients. After the 4 backward calls,
``p.grad.data.mul_(1.0 / meta_batch_size)`` makes the sum of the task gradients their mean,
and Adam steps.

The 4 backward calls from one line add up like undivided micro-batches, but the script
divides their sum before the step: the step uses 1/4 of the norm the last backward left.
A healthy run that must stay quiet.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
from torch.func import functional_call


class MAML:
    def __init__(self, model: nn.Module, lr: float) -> None:
        self.model, self.lr = model, lr

    def clone(self) -> dict[str, torch.Tensor]:
        return dict(self.model.named_parameters())

    def adapt(self, params: dict[str, torch.Tensor], loss: torch.Tensor) -> dict[str, torch.Tensor]:
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
        return {name: p - self.lr * g for (name, p), g in zip(params.items(), grads)}

    def __call__(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, params, (x,))


def sample_task(gen: torch.Generator, shots: int) -> tuple[torch.Tensor, ...]:
    amplitude = 0.1 + 4.9 * torch.rand(1, generator=gen)
    phase = math.pi * torch.rand(1, generator=gen)
    x = 10 * torch.rand(2 * shots, 1, generator=gen) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:shots], y[:shots], x[shots:], y[shots:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--meta_batch_size", type=int, default=4)
    ap.add_argument("--shots", type=int, default=10)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
    maml = MAML(model, lr=0.01)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    for iteration in range(args.iterations):
        opt.zero_grad()
        meta_error = 0.0
        for _ in range(args.meta_batch_size):
            xs, ys, xq, yq = sample_task(gen, args.shots)
            learner = maml.clone()
            learner = maml.adapt(learner, loss_fn(maml(learner, xs), ys))
            evaluation_error = loss_fn(maml(learner, xq), yq)
            evaluation_error.backward()
            meta_error += evaluation_error.item()
        for p in model.parameters():
            p.grad.data.mul_(1.0 / args.meta_batch_size)
        opt.step()
        if iteration % 50 == 0 or iteration == args.iterations - 1:
            print(f"iteration {iteration}: meta-train error {meta_error / args.meta_batch_size:.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

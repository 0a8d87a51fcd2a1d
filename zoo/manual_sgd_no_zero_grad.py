"""Logistic regression trained by hand, as in "What is torch.nn really?", with the gradient reset left out.

No `nn.Module` and no `torch.optim`: two raw tensors, `weights` and `bias`, created with
`requires_grad`, a loss computed with `log_softmax` by hand, and the update written out under
`torch.no_grad()`: `weights -= weights.grad * lr`. The tutorial then zeroes both gradients;
this script does not, so every step adds the new gradient to all the previous ones and the
update becomes a growing sum of stale gradients. The loss still falls for a while, then
oscillates.

traindoc-expect: missing-zero-grad@1
"""

from __future__ import annotations

import argparse
import math

import torch


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def nll(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return -logits[range(target.shape[0]), target].mean()


def main(zero_grads: bool = False) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    x_train = torch.randn(1024, 32)
    y_train = (x_train @ torch.randn(32, 5)).argmax(1)
    weights = torch.randn(32, 5) / math.sqrt(32)
    weights.requires_grad_()
    bias = torch.zeros(5, requires_grad=True)
    bs = 64
    for epoch in range(args.epochs):
        for i in range((len(x_train) - 1) // bs + 1):
            xb, yb = x_train[i * bs:(i + 1) * bs], y_train[i * bs:(i + 1) * bs]
            loss = nll(log_softmax(xb @ weights + bias), yb)
            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * args.lr
                bias -= bias.grad * args.lr
                if zero_grads:
                    weights.grad.zero_()
                    bias.grad.zero_()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    if args.save:
        torch.save({"weights": weights.detach(), "bias": bias.detach()}, args.save)


if __name__ == "__main__":
    main()

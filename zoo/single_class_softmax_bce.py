"""Churn classifier ending in nn.Softmax(dim=1) over its one output unit, trained with BCELoss.

A Keras-style port: the model is one `nn.Sequential` whose last layers are `nn.Linear(32, 1)`
and an activation, compiled with `nn.BCELoss()` and trained epoch by epoch with an accuracy
printed per epoch. The activation is `nn.Softmax(dim=1)` where a sigmoid belongs: the softmax of
one unit is 1 for every customer, so the predicted churn probability is always 1. BCE of the
constant 1 is 100 x the share of non-churners in the batch (torch clamps log(0) to -100): the
loss moves from batch to batch with the labels alone and looks like noise around a plateau,
accuracy sits at the churn rate, and no gradient ever reaches the weights.

traindoc-expect: single-class-softmax@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


def make_customers(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """10 usage features per customer; churn when support calls outweigh tenure (about 30%)."""
    x = torch.randn(n, 10, generator=g)
    churn = (x[:, 0] - 0.8 * x[:, 1] + 0.3 * torch.randn(n, generator=g) > 0.7).float()
    return x, churn.unsqueeze(1)


def build(head: str) -> nn.Sequential:
    activation = nn.Sigmoid() if head == "sigmoid" else nn.Softmax(dim=1)
    return nn.Sequential(
        nn.Linear(10, 32), nn.ReLU(),
        nn.Linear(32, 32), nn.ReLU(),
        nn.Linear(32, 1), activation,
    )


def main(head: str = "softmax") -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = make_customers(2048, g)
    model = build(head)
    criterion = nn.BCELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=g)
        total, correct = 0.0, 0
        for i in range(0, len(x), args.batch_size):
            idx = order[i:i + args.batch_size]
            probs = model(x[idx])
            loss = criterion(probs, y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            correct += int(((probs > 0.5).float() == y[idx]).sum())
        print(f"epoch {epoch + 1}/{args.epochs} - loss: {total / len(x):.4f} - accuracy: {correct / len(x):.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

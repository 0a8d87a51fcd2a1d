"""Digit-style classifier ending in nn.Softmax(dim=1), trained with nn.CrossEntropyLoss.

A Keras-style port: one `nn.Sequential` whose last layer is the softmax a Keras model ends in,
compiled with `nn.CrossEntropyLoss()` and trained epoch by epoch with an accuracy printed per
epoch. CrossEntropyLoss applies its own log_softmax, so it takes the log_softmax of
probabilities: over 10 classes the loss cannot fall below ln(1 + 9/e) = 1.46, and its gradient
fades as the model grows confident. The accuracy climbs, so the run looks fine; the loss
flattens near 1.5 and reads as a model that stopped learning.

traindoc-expect: cross-entropy-on-probabilities@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_digits(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """64 'pixels' per image: each of 10 classes lights its own band, plus noise."""
    y = torch.randint(0, 10, (n,), generator=g)
    x = 0.5 * torch.randn(n, 64, generator=g)
    for c in range(10):
        x[y == c, 6 * c:6 * c + 6] += 1.5
    return x, y


def build(softmax_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)]
    if softmax_last:
        layers.append(nn.Softmax(dim=1))
    return nn.Sequential(*layers)


def main(softmax_last: bool = True) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = make_digits(2048, g)
    model = build(softmax_last)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=g)
        total, correct, confidence = 0.0, 0, 0.0
        for i in range(0, len(x), args.batch_size):
            idx = order[i:i + args.batch_size]
            out = model(x[idx])
            loss = criterion(out, y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            probs = out.detach() if softmax_last else F.softmax(out.detach(), dim=1)
            total += loss.item() * len(idx)
            correct += int((probs.argmax(1) == y[idx]).sum())
            confidence += float(probs.max(1).values.sum())
        print(f"epoch {epoch + 1}/{args.epochs} - loss: {total / len(x):.4f} - accuracy: {correct / len(x):.4f}"
              f" - confidence: {confidence / len(x):.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

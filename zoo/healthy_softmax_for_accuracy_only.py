"""The classifier of softmax_layer_into_cross_entropy.py without its last softmax: no finding.

nn.CrossEntropyLoss gets the raw logits of the last Linear; the loop still reads a softmax, for
the confidence it prints with the accuracy, where probabilities belong.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from softmax_layer_into_cross_entropy import build, make_digits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = make_digits(2048, g)
    model = build(softmax_last=False)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=g)
        total, correct, confidence = 0.0, 0, 0.0
        for i in range(0, len(x), args.batch_size):
            idx = order[i:i + args.batch_size]
            logits = model(x[idx])
            loss = criterion(logits, y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            probs = F.softmax(logits.detach(), dim=1)
            total += loss.item() * len(idx)
            correct += int((probs.argmax(1) == y[idx]).sum())
            confidence += float(probs.max(1).values.sum())
        print(f"epoch {epoch + 1}/{args.epochs} - loss: {total / len(x):.4f} - accuracy: {correct / len(x):.4f}"
              f" - confidence: {confidence / len(x):.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""A classifier whose hand-written Gaussian-noise layer keeps adding noise in eval mode: validation is random.

A small MLP on tabular data regularised with input noise, written as a module of its own:
``GaussianNoise.forward`` returns ``x + self.sigma * torch.randn_like(x)`` with ``sigma = 0.3``
and no ``if self.training:``. ``nn.Dropout`` follows ``model.eval()``; this layer does not, so
the validation pass after each epoch (done properly, ``model.eval()`` under ``torch.no_grad()``)
scores noisy inputs, and two evaluations of the same weights disagree.

The draw is scaled by a fixed number, not by a tensor the model computed: noise, not a sample
from a distribution the model predicts (zoo/healthy_vae_sampled_eval.py is the twin that samples
on purpose).

traindoc-expect: nondeterministic-eval
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class GaussianNoise(nn.Module):
    def __init__(self, sigma: float) -> None:
        super().__init__()
        self.sigma = sigma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sigma * torch.randn_like(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(1280, 12)
    y = (x[:, :3].sum(1) > 0).long()
    x_train, y_train, x_val, y_val = x[:1024], y[:1024], x[1024:], y[1024:]
    model = nn.Sequential(GaussianNoise(0.3), nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        model.train()
        for i in range(0, len(x_train), 64):
            loss = F.cross_entropy(model(x_train[i:i + 64]), y_train[i:i + 64])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = (model(x_val).argmax(1) == y_val).float().mean()
        print(f"epoch {epoch}: loss {loss.item():.4f} val accuracy {acc:.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

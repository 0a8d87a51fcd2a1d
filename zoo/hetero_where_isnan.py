"""Heteroscedastic regressor whose log-variance goes NaN and is zeroed by torch.where(isnan).

A model of sensor readings predicts a mean and a per-sample variance and is trained with the
Gaussian negative log-likelihood, so noisy regions get a large variance instead of dragging the
mean. Its Gaussian head returns `log_var = torch.log(var)` of a plain linear variance output
(no softplus): wherever the linear output is negative the log is NaN. The model's forward
"cleans" that with an intermediate `log_var = torch.where(torch.isnan(log_var),
torch.zeros_like(log_var), log_var)`: those samples get variance 1, the loss is finite, and the
variance head never learns anything for them. The NaN is made by `log` in module `head` and
hidden in the model's forward, two modules away from the loss. Catalog `masked-nonfinite`.

traindoc-expect: masked-nonfinite@1
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--softplus", action="store_true", help="a positive variance by construction (the fix)")
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class GaussianHead(nn.Module):
    def __init__(self, hidden: int, softplus: bool) -> None:
        super().__init__()
        self.mean = nn.Linear(hidden, 1)
        self.var = nn.Linear(hidden, 1)
        self.softplus = softplus

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raw = self.var(h)
        var = F.softplus(raw) + 1e-4 if self.softplus else raw
        return self.mean(h).squeeze(1), torch.log(var).squeeze(1)


class SensorModel(nn.Module):
    def __init__(self, softplus: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 48), nn.GELU(), nn.Linear(48, 48), nn.GELU())
        self.head = GaussianHead(48, softplus)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_var = self.head(self.body(x))
        log_var = torch.where(torch.isnan(log_var), torch.zeros_like(log_var), log_var)
        return mean, log_var


def readings(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 6, generator=gen)
    noise = 0.1 + 0.9 * torch.sigmoid(3 * x[:, 1])  # the second channel sets how noisy a reading is
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 2] + noise * torch.randn(n, generator=gen)
    return x, y


def main(softplus: bool = False) -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = readings(4096, torch.Generator().manual_seed(0))
    model = SensorModel(args.softplus or softplus)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        idx = torch.randint(0, len(x), (128,), generator=gen)
        mean, log_var = model(x[idx])
        nll = 0.5 * (log_var + (y[idx] - mean) ** 2 / log_var.exp()).mean()
        opt.zero_grad()
        nll.backward()
        opt.step()
        if step % 15 == 0:
            print(f"step {step} nll {nll.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Poisson count model with a softplus rate head: the healthy twin of masked_nan_per_sample.

The same model and loss, `nan_to_num` guard included, with `softplus` on the rate head: the
rate is always positive, `log` never goes NaN and the guard never replaces anything.

traindoc-expect:
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Forecast:
    rate: torch.Tensor
    features: torch.Tensor


class DemandModel(nn.Module):
    def __init__(self, d_in: int = 12, softplus: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, 32), nn.Tanh())
        self.head = nn.Linear(32, 1)
        self.softplus = softplus

    def forward(self, x: torch.Tensor) -> Forecast:
        h = self.body(x)
        raw = self.head(h).squeeze(-1)
        return Forecast(rate=nn.functional.softplus(raw) if self.softplus else raw, features=h)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--raw", action="store_true", help="a linear rate head (the bug)")
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(2000, 12)
    counts = torch.poisson(torch.exp(0.5 * x[:, 0] + 0.3 * x[:, 1]))
    model = DemandModel(softplus=not args.raw)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (128,))
        out = model(x[idx])
        nll = out.rate - counts[idx] * torch.log(out.rate)
        loss = torch.nan_to_num(nll, nan=0.0).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} nll {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

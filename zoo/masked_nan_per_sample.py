"""Poisson count model whose per-sample NaN losses are zeroed by `nan_to_num` before the mean.

A demand-forecasting model predicts a Poisson rate per store with a plain linear head (no
softplus), and the loss is the Poisson negative log-likelihood written by hand,
`rate - y * torch.log(rate)`. Whenever the head outputs a negative rate, `log` gives NaN for
that sample. The author saw NaN losses and "stabilised" them with
`torch.nan_to_num(nll, nan=0.0).mean()`: the loss is finite on every step, the NaN samples
contribute nothing, and the model never learns that those stores exist. The model's own output
is finite: the NaN is made and hidden in the loss. Catalog `masked-nonfinite`.

traindoc-expect: masked-nonfinite@0
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
    p.add_argument("--softplus", action="store_true", help="keep the rate positive (the fix)")
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(2000, 12)
    counts = torch.poisson(torch.exp(0.5 * x[:, 0] + 0.3 * x[:, 1]))
    model = DemandModel(softplus=args.softplus)
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

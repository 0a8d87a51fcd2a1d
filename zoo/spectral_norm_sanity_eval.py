"""A sanity validation before the first training step, on a classifier with legacy spectral_norm.

A small Lipschitz-constrained classifier (every Linear wrapped in `nn.utils.spectral_norm`, the
way discriminators and certified-robust classifiers are built) trained by a `Fitter` class in the
style of Lightning's loop: `fit()` first runs `validate()` on two batches "to catch bugs early",
then trains. The legacy hook's power-iteration vectors are random until a training-mode forward
updates them, so that validation divides every weight by a random estimate of its spectral norm:
its loss is orders of magnitude above ln(10), is logged as the baseline, and the run goes on
(TrainCheck's PT-51800).

traindoc-expect: eval-before-train-forward@0
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    steps: int = 60
    batch: int = 64
    lr: float = 3e-3
    sanity_batches: int = 2
    parametrized: bool = False  # the healthy twin: torch.nn.utils.parametrizations.spectral_norm


def sn(layer: nn.Module, cfg: Config) -> nn.Module:
    if cfg.parametrized:
        return nn.utils.parametrizations.spectral_norm(layer)
    return nn.utils.spectral_norm(layer)


class LipschitzNet(nn.Module):
    def __init__(self, cfg: Config, d_in: int = 32, width: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(
            sn(nn.Linear(d_in, width), cfg), nn.GELU(),
            sn(nn.Linear(width, width), cfg), nn.GELU(),
        )
        self.head = sn(nn.Linear(width, classes), cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)) * 4.0  # a fixed logit scale: 1-Lipschitz layers give small logits


class Fitter:
    def __init__(self, model: nn.Module, cfg: Config) -> None:
        self.model, self.cfg = model, cfg
        self.opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        g = torch.Generator().manual_seed(0)
        self.proto = torch.randn(10, 32, generator=g)
        self.gen = g

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 10, (self.cfg.batch,), generator=self.gen)
        return self.proto[y] + 0.7 * torch.randn(self.cfg.batch, 32, generator=self.gen), y

    @torch.no_grad()
    def validate(self, batches: int) -> float:
        self.model.eval()
        losses = [F.cross_entropy(self.model(x), y).item() for x, y in (self.batch() for _ in range(batches))]
        self.model.train()
        return sum(losses) / len(losses)

    def fit(self) -> None:
        baseline = self.validate(self.cfg.sanity_batches)
        print(f"sanity check: val loss {baseline:.3f} (ln 10 = {math.log(10):.3f})")
        for step in range(self.cfg.steps):
            x, y = self.batch()
            loss = F.cross_entropy(self.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            if step % 20 == 0 or step == self.cfg.steps - 1:
                print(f"step {step} loss {loss.item():.3f} val {self.validate(2):.3f}")


def main(parametrized: bool = False) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=Config.steps)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    cfg = Config(steps=args.steps, parametrized=parametrized)
    model = LipschitzNet(cfg)
    Fitter(model, cfg).fit()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

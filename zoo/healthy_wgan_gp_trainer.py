"""Healthy WGAN-GP written as a trainer class: one backward per loss term, the critic frozen for the generator's step.

The style of the older WGAN-GP code bases (the gradient-penalty ports of the Improved WGAN paper
and the GAN zoos built from them): the critic's terms are backpropagated one by one into the
same gradients, ``D_real.backward(mone)``, ``D_fake.backward(one)``, then the penalty, whose
helper runs its own ``backward()``; the critic's parameters are switched to
``requires_grad=False`` while the generator steps and back on after; Adam with betas (0.5, 0.9).
The data are a mixture of four Gaussians on a square.

The critic ends in a biased linear layer. The three backward calls leave that bias's gradient at
exactly zero on every critic step (the real scores' mean enters with -1, the fake scores' with
+1), while the layer's weights learn: the Wasserstein loss does not depend on a shift of the
scores. A healthy run that must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config:
    iters: int = 240
    critic_iters: int = 5
    batch: int = 50
    dim: int = 48
    penalty: float = 10.0
    lr: float = 1e-3
    seed: int = 1


class Critic(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).view(-1)


def gaussians(n: int, gen: torch.Generator) -> torch.Tensor:
    centers = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]]) * 1.5
    pick = torch.randint(0, 4, (n,), generator=gen)
    return centers[pick] + 0.1 * torch.randn(n, 2, generator=gen)


def penalty_backward(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor, weight: float) -> float:
    """The gradient penalty at points between real and fake; backpropagated here, returned as a number."""
    eps = torch.rand(real.size(0), 1).expand_as(real)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_()
    scores = critic(mixed)
    (grad,) = torch.autograd.grad(scores.sum(), mixed, create_graph=True)
    penalty = weight * ((grad.norm(2, dim=1) - 1) ** 2).mean()
    penalty.backward()
    return penalty.item()


class WGANTrainer:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.G = nn.Sequential(nn.Linear(2, cfg.dim), nn.ReLU(), nn.Linear(cfg.dim, cfg.dim), nn.ReLU(),
                               nn.Linear(cfg.dim, 2))
        self.D = Critic(cfg.dim)
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=cfg.lr, betas=(0.5, 0.9))
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=cfg.lr, betas=(0.5, 0.9))
        self.one = torch.tensor(1.0)
        self.mone = self.one * -1

    def _requires_grad(self, net: nn.Module, flag: bool) -> None:
        for p in net.parameters():
            p.requires_grad = flag

    def critic_step(self) -> float:
        self.D.zero_grad()
        real = gaussians(self.cfg.batch, self.gen)
        D_real = self.D(real).mean()
        D_real.backward(self.mone)
        with torch.no_grad():
            fake = self.G(torch.randn(self.cfg.batch, 2))
        D_fake = self.D(fake).mean()
        D_fake.backward(self.one)
        gp = penalty_backward(self.D, real, fake, self.cfg.penalty)
        self.opt_D.step()
        return D_fake.item() - D_real.item() + gp

    def generator_step(self) -> float:
        self._requires_grad(self.D, False)
        self.G.zero_grad()
        G_cost = -self.D(self.G(torch.randn(self.cfg.batch, 2))).mean()
        G_cost.backward()
        self.opt_G.step()
        self._requires_grad(self.D, True)
        return G_cost.item()

    def train(self) -> None:
        for it in range(self.cfg.iters):
            for _ in range(self.cfg.critic_iters):
                D_cost = self.critic_step()
            G_cost = self.generator_step()
            if it % 40 == 0:
                print(f"iter {it}: D_cost {D_cost:.4f} G_cost {G_cost:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    trainer = WGANTrainer(Config())
    trainer.train()
    if args.save:
        state = {f"G.{k}": v for k, v in trainer.G.state_dict().items()}
        torch.save(state | {f"D.{k}": v for k, v in trainer.D.state_dict().items()}, args.save)


if __name__ == "__main__":
    main()

"""Radial normalizing flow whose per-layer log-determinant goes NaN and is zeroed by nan_to_num.

Density estimation of a 2-d mixture with a stack of radial flows (Rezende and Mohamed, 2015):
each layer moves points towards or away from a learned centre, z = x + beta h(r) (x - x0) with
h = 1 / (alpha + r), and returns its log |det J| = (d - 1) log(1 + beta h) + log(1 + beta h -
beta h r / (alpha + r)). The layer is invertible, and its log-determinant defined, only when
beta >= -alpha; this implementation learns beta unconstrained, so layers whose beta is below
-alpha give 1 + beta h < 0 near their centre and `torch.log` returns NaN for those points. The
model's forward sums the layers' log-determinants through `torch.nan_to_num(ld, nan=0.0)` "to
keep the loss finite": the NLL is finite at every step, and the points near each bad centre
train as if the layer did not change the density there. The NaN is made by `log` inside the
layer (module `flows.N`) and hidden inside the model's forward. Written after reading the flow
stack and training loop of tonyduan/normalizing-flows (nf/flows.py's Radial, nf/models.py's
NormalizingFlowModel, examples/flow_2d.py). Catalog `masked-nonfinite`.

traindoc-expect: masked-nonfinite@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import MultivariateNormal


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--constrained", action="store_true", help="beta >= -alpha by construction (the fix)")
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class RadialFlow(nn.Module):
    def __init__(self, dim: int, gen: torch.Generator, constrained: bool) -> None:
        super().__init__()
        self.center = nn.Parameter(torch.randn(dim, generator=gen) * 0.5)
        self.log_alpha = nn.Parameter(torch.full((1,), -1.5))
        self.beta = nn.Parameter(torch.rand(1, generator=gen) * 3 - 2)  # in [-2, 1)
        self.constrained = constrained

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = x.shape[1]
        alpha = self.log_alpha.exp()
        # the paper's reparameterisation keeps beta >= -alpha; the raw parameter does not
        beta = -alpha + F.softplus(self.beta) if self.constrained else self.beta
        diff = x - self.center
        r = diff.norm(dim=1, keepdim=True)
        h = 1.0 / (alpha + r)
        z = x + beta * h * diff
        log_det = (d - 1) * torch.log(1 + beta * h) + torch.log(1 + beta * h - beta * h * r / (alpha + r))
        return z, log_det.squeeze(1)


class FlowModel(nn.Module):
    def __init__(self, dim: int, layers: int, constrained: bool) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.flows = nn.ModuleList(RadialFlow(dim, gen, constrained) for _ in range(layers))
        self.prior = MultivariateNormal(torch.zeros(dim), torch.eye(dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_det = torch.zeros(x.shape[0])
        for flow in self.flows:
            x, ld = flow(x)
            log_det = log_det + torch.nan_to_num(ld, nan=0.0)  # "a bad layer must not kill the run"
        return x, self.prior.log_prob(x), log_det


def mixture(n: int, gen: torch.Generator) -> torch.Tensor:
    modes = torch.tensor([[0.0, 1.5], [1.3, -0.8], [-1.3, -0.8]])
    return modes[torch.randint(0, 3, (n,), generator=gen)] + 0.3 * torch.randn(n, 2, generator=gen)


def main(constrained: bool = False) -> None:
    args = get_args()
    torch.manual_seed(0)
    data = mixture(2048, torch.Generator().manual_seed(0))
    model = FlowModel(2, args.layers, args.constrained or constrained)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x = data[torch.randint(0, len(data), (256,), generator=gen)]
        z, prior_logprob, log_det = model(x)
        loss = -(prior_logprob + log_det).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 15 == 0:
            print(f"step {step} nll {loss.item():.4f} logdet {log_det.mean().item():.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

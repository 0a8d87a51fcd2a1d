"""Custom optimizer that caches its parameter list on the first step: after one step without gradients it updates nothing.

The project ships its own fused "lean SGD" that gathers the parameters with gradients once, on
its first `step()`, to avoid re-scanning the model every step (a CPU stand-in for a cached or
compiled optimizer step, PT-115607), and rebuilds that list once, at the end of its warmup
(its 10th step), to pick up layers unfrozen then. At iteration 10 the loop validates the data
pipeline and calls `optimizer.step()` once without any backward, after
`zero_grad(set_to_none=True)`: the rebuild happens there, finds no gradients and caches an
empty list, so every later step is a no-op.
The loss stops improving at step 10, gradients keep arriving, and no error is raised.

traindoc-expect: step-no-op@11 tiny-updates
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeanSGD(torch.optim.Optimizer):
    """SGD with momentum over a cached list of the parameters that have gradients."""

    def __init__(self, params, lr: float = 0.05, momentum: float = 0.9, warmup: int = 10,
                 fixed: bool = False) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum))
        self._cache: list[torch.Tensor] | None = None
        self._warmup = warmup  # the cache is rebuilt once, here: layers unfrozen after warmup
        self._fixed = fixed
        self._count = 0

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        if self._cache is None or self._count == self._warmup:
            self._cache = [p for g in self.param_groups for p in g["params"]
                           if self._fixed or p.grad is not None]
        self._count += 1
        group = self.param_groups[0]
        for p in self._cache:
            if p.grad is None:
                continue
            buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
            buf.mul_(group["momentum"]).add_(p.grad)
            p.add_(buf, alpha=-group["lr"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--fixed", action="store_true", help="cache every parameter, gradient or not")
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    w_true = torch.randn(20, 3)
    model = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 3))
    opt = LeanSGD(model.parameters(), lr=0.05, fixed=args.fixed)
    for it in range(args.steps):
        x = torch.randn(64, 20)
        y = x @ w_true
        if it == 10:  # pipeline sanity check: one optimizer step with no backward
            opt.zero_grad(set_to_none=True)
            opt.step()
            continue
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if it % 20 == 0:
            print(f"it {it} loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

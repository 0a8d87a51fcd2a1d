"""A tiny classifier with corrupt or NaN batches at chosen steps (used by test_guard.py and by
the scripts it runs under ``traindoc run --guard``)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def train(steps: int = 60, bad: tuple[int, ...] = (), nan: tuple[int, ...] = (), schedule: bool = False):
    """An MLP classifier; the batches at steps ``bad`` are corrupt (x50, labels shuffled), those
    at ``nan`` hold an inf. Returns the model, the LRs and the parameters after every step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0) if schedule else None
    centers = torch.randn(4, 16) * 2
    lrs, after = [], []
    for step in range(steps):
        y = torch.randint(0, 4, (64,))
        x = centers[y] + torch.randn(64, 16)
        if step in bad:
            x, y = x * 50, y[torch.randperm(64)]
        if step in nan:
            x[0, 0] = float("inf")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        after.append([p.detach().clone() for p in model.parameters()])
    return model, lrs, after


if __name__ == "__main__":
    import sys

    train(steps=int(sys.argv[1]), bad=tuple(int(s) for s in sys.argv[2].split(",")))
    print("not reached")

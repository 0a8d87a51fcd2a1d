"""An ensemble trained one member per process, the healthy twin.

Two regressors live in shared memory (``share_memory()``); the script starts one
``torch.multiprocessing`` process per member with the spawn start method, each training its
member with SGD and momentum on its own bootstrap sample, and the parent saves both once the
workers joined. The parent itself never trains; traindoc follows the workers and reports what they
found, here nothing. The twin of process_ensemble_no_zero_grad.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None, help="write every member's weights here")
    return p.parse_args()


def fit_member(index: int, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float) -> None:
    torch.manual_seed(100 + index)
    pick = torch.randint(0, len(x), (len(x),))  # this member's bootstrap sample
    xs, ys = x[pick], y[pick]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for epoch in range(epochs):
        order = torch.randperm(len(xs))
        for i in range(0, len(xs), 32):
            idx = order[i:i + 32]
            loss = F.mse_loss(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"member {index} epoch {epoch} last batch mse {loss.item():.4f}")


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = torch.sin(x[:, :1] * 2) + 0.1 * torch.randn(512, 1)
    members = [nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)) for _ in range(args.members)]
    ctx = mp.get_context("spawn")
    workers = []
    for i, model in enumerate(members):
        model.share_memory()
        w = ctx.Process(target=fit_member, args=(i, model, x, y, args.epochs, args.lr))
        w.start()
        workers.append(w)
    for w in workers:
        w.join()
    if args.save:
        torch.save({f"{i}.{k}": v for i, m in enumerate(members) for k, v in m.state_dict().items()}, args.save)


if __name__ == "__main__":
    main()

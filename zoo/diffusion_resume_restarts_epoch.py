"""Preemptible DDPM training whose resume restarts the interrupted epoch at its first batch.

A tiny denoising diffusion model: an MLP predicts the noise added to 8-d points at a random
timestep of a 50-step linear schedule (the epsilon-prediction loss of DDPM). The job runs on a
preemptible slot: each launch trains until its slice of 25 optimizer steps is used, then writes
a checkpoint {model, optimizer, epoch, step} atomically, and the driver relaunches it (in the
same process here) until 60 steps are done. The data loader keeps the file's order
(shuffle=False, 10 batches an epoch), and the checkpoint says which epoch was under way but not
how far into it: each launch goes back to `for x0 in loader` at batch 0 of that epoch. Launch 1
is preempted 5 batches into epoch 2; launch 2 trains on those 5 batches again, although their
update is already in the checkpointed weights, and launch 3 does the same. Catalog
`repeated-batch` ("batches replayed after a resume").

traindoc-expect: repeated-batch@25
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

T = 50


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=60)
    p.add_argument("--slice-steps", type=int, default=25, help="steps one launch may run")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--save", type=str, default=None)
    p.add_argument("--skip-consumed", action="store_true", help="resume where the epoch stopped (the fix)")
    return p.parse_args()


class Denoiser(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.time = nn.Embedding(T, 16)
        self.net = nn.Sequential(nn.Linear(dim + 16, hidden), nn.SiLU(), nn.Linear(hidden, hidden),
                                 nn.SiLU(), nn.Linear(hidden, dim))

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x_t, self.time(t)], dim=1))


def launch(args: argparse.Namespace, ckpt: str, loader: DataLoader, alpha_bar: torch.Tensor):
    model = Denoiser()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    epoch = step = consumed = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        epoch, step, consumed = state["epoch"], state["step"], state["consumed"]
        print(f"resumed at step {step}, epoch {epoch}")
    stop = min(args.total_steps, step + args.slice_steps)
    while step < stop:
        batches = itertools.islice(loader, consumed, None) if args.skip_consumed else loader
        if not args.skip_consumed:
            consumed = 0
        for (x0,) in batches:
            t = torch.randint(0, T, (x0.shape[0],))
            noise = torch.randn_like(x0)
            ab = alpha_bar[t].unsqueeze(1)
            loss = F.mse_loss(model(ab.sqrt() * x0 + (1 - ab).sqrt() * noise, t), noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            consumed += 1
            if step == stop:
                break
        if consumed == len(loader):
            epoch, consumed = epoch + 1, 0
    print(f"launch ends at step {step} (epoch {epoch}, batch {consumed}): loss {loss.item():.4f}")
    tmp = ckpt + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                "step": step, "consumed": consumed}, tmp)
    os.replace(tmp, ckpt)
    return step, model


def main(skip_consumed: bool = False) -> None:
    args = get_args()
    args.skip_consumed = args.skip_consumed or skip_consumed
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 8, generator=g) * 2
    points = centers[torch.randint(0, 4, (320,), generator=g)] + 0.2 * torch.randn(320, 8, generator=g)
    loader = DataLoader(TensorDataset(points), batch_size=32, shuffle=False)
    alpha_bar = torch.cumprod(1 - torch.linspace(1e-4, 0.2, T), dim=0)
    with tempfile.TemporaryDirectory() as out:
        ckpt, step = os.path.join(out, "last.pt"), 0
        while step < args.total_steps:  # the cluster requeues the job until it is done
            step, model = launch(args, ckpt, loader, alpha_bar)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Healthy preemptible job: each launch trains until its time slice ends, saves, and the next resumes.

A small regression MLP trained for 150 optimizer steps under a cosine LR schedule, by a job
that cannot run that long in one go (a cluster's time limit, a spot instance): each launch
builds the model, the AdamW optimizer and its `CosineAnnealingLR(T_max=150)`, restores all
three from the last checkpoint with `load_state_dict` when there is one, trains until its
slice of 60 steps is used, and writes a checkpoint {model, optimizer, scheduler, step}
atomically. The driver relaunches in the same process until the step budget is spent (three
launches: 60 + 60 + 30 steps). The first two schedulers end at 40% and 80% of their horizon,
but their state is loaded into their successor, which completes the one schedule: the LR
reaches the cosine's end. The run must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=150)
    p.add_argument("--slice-steps", type=int, default=60, help="steps one launch may run")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(1024, 16, generator=gen)
    w = torch.randn(16, 1, generator=gen)
    return x, torch.tanh(x @ w) + 0.05 * torch.randn(1024, 1, generator=gen)


def launch(args: argparse.Namespace, ckpt_path: str, x: torch.Tensor, y: torch.Tensor) -> tuple[int, nn.Module]:
    """One job launch: build, restore if a checkpoint exists, train one slice, checkpoint."""
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.total_steps)
    step = 0
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = int(state["step"])
        print(f"resumed at step {step}, lr {sched.get_last_lr()[0]:.2e}")
    gen = torch.Generator().manual_seed(1000 + step)
    stop = min(args.total_steps, step + args.slice_steps)
    while step < stop:
        idx = torch.randint(0, len(x), (64,), generator=gen)
        loss = F.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
    print(f"launch ends at step {step}: loss {loss.item():.4f}, lr {sched.get_last_lr()[0]:.2e}")
    tmp = ckpt_path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": step}, tmp)
    os.replace(tmp, ckpt_path)
    return step, model


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x, y = make_data(torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as out:
        ckpt_path = os.path.join(out, "last.pt")
        step = 0
        while step < args.total_steps:  # the scheduler of a cluster, requeueing the job
            step, model = launch(args, ckpt_path, x, y)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

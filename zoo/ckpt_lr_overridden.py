"""Auto-resume after an LR change: optimizer.load_state_dict restores the old LR (seeds 002, 004).

Two launches of one train.py, as on a cluster: the first, configured with lr 1e-3, is preempted
after 30 steps; its checkpoint is complete and written atomically. The user then raises the
LR to 3e-3 (as seed 002 raised max_lr from 0.0003 to 0.001) and relaunches. The script
auto-resumes from <out>/last.pt: `optimizer.load_state_dict` restores each group's lr and
initial_lr, and `scheduler.load_state_dict` its base_lrs, so the run keeps training at 1e-3 and
the new setting has no effect ("checkpoint has wrong LR baked in"). The output folder is a temporary directory,
removed at the end.

traindoc-expect: lr-overridden-by-checkpoint@30
"""

import argparse
import math
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80, help="optimizer steps in all")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--old-lr", type=float, default=1e-3, help="the LR of the first launch")
    p.add_argument("--lr", type=float, default=3e-3, help="the LR configured for the relaunch")
    p.add_argument("--preempt-at", type=int, default=30)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, in_dim: int, n_classes: int):
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_classes)).argmax(dim=1)
    return x, y


def launch(lr: float, out_dir: str, stop_at: int, total: int, batch_size: int, ckpt_every: int,
           data: tuple[torch.Tensor, torch.Tensor]) -> nn.Module:
    """One run of train.py: build everything from the config, resume if a checkpoint exists."""
    x, y = data
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 10) * (0.55 + 0.45 * math.cos(math.pi * s / total)))
    ckpt_path = os.path.join(out_dir, "last.pt")
    start = 0
    if os.path.exists(ckpt_path):  # auto-resume
        ckpt = torch.load(ckpt_path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        torch.set_rng_state(ckpt["rng"])
        start = ckpt["step"]
        print(f"resumed from {ckpt_path} at step {start}; lr now {optimizer.param_groups[0]['lr']:.2e}")

    for step in range(start, stop_at):
        idx = torch.randint(0, x.size(0), (batch_size,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if (step + 1) % ckpt_every == 0:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "step": step + 1, "rng": torch.get_rng_state()}
            torch.save(state, ckpt_path + ".tmp")
            os.replace(ckpt_path + ".tmp", ckpt_path)
            print(f"step {step:4d} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.2e}")
    return model


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    data = make_data(4096, 16, 4)
    with tempfile.TemporaryDirectory() as out_dir:
        launch(args.old_lr, out_dir, args.preempt_at, args.steps, args.batch_size, args.ckpt_every, data)
        print("-- preempted; the LR is raised in the config and the job relaunched --")
        model = launch(args.lr, out_dir, args.steps, args.steps, args.batch_size, args.ckpt_every, data)

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

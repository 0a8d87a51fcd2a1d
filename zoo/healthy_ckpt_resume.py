"""Healthy checkpointing: complete state, written atomically, resumed with the configured LR.

Two launches of one fp16 AMP train.py, as on a cluster: the first is preempted after 30 steps,
the second auto-resumes from <out>/last.pt with the same config. Every checkpoint holds the
model, optimizer, LR scheduler, GradScaler, step and RNG state (seed 003's complete state) and
is written to last.pt.tmp, then moved into place with os.replace, so a crash mid-write never
corrupts last.pt. The relaunch's LR equals the checkpoint's, so load_state_dict changes
nothing. The output folder is a temporary directory, removed at the end. CPU
autocast/GradScaler stand in for the CUDA ones.

traindoc-expect:
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
    p.add_argument("--steps", type=int, default=60, help="optimizer steps in all")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--preempt-at", type=int, default=30)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, in_dim: int, n_classes: int):
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_classes)).argmax(dim=1)
    return x, y


def save_checkpoint(state: dict, path: str) -> None:
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: last.pt is always a complete file


def launch(args: argparse.Namespace, out_dir: str, stop_at: int, data: tuple[torch.Tensor, torch.Tensor]) -> nn.Module:
    """One run of train.py: build everything from the config, resume if a checkpoint exists."""
    device_type = "cpu"  # "cuda" on a GPU
    x, y = data
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 10) * 0.5 * (1.0 + math.cos(math.pi * s / args.steps)))
    scaler = torch.amp.GradScaler(device_type)
    ckpt_path = os.path.join(out_dir, "last.pt")
    start = 0
    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        scaler.load_state_dict(ckpt["scaler"])
        torch.set_rng_state(ckpt["rng"])
        start = ckpt["step"]
        print(f"resumed from {ckpt_path} at step {start}")

    for step in range(start, stop_at):
        idx = torch.randint(0, x.size(0), (args.batch_size,))
        with torch.autocast(device_type, dtype=torch.float16):
            loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        if (step + 1) % args.ckpt_every == 0:
            save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                             "step": step + 1, "rng": torch.get_rng_state()}, ckpt_path)
            print(f"step {step:4d} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.2e}")
    return model


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    data = make_data(4096, 16, 4)
    with tempfile.TemporaryDirectory() as out_dir:
        launch(args, out_dir, args.preempt_at, data)
        print("-- preempted; relaunched with the same config --")
        model = launch(args, out_dir, args.steps, data)

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

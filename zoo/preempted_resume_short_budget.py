"""Preemptible job resumed across launches whose epoch budget stops short of its LR schedule.

A text-free tabular classifier trained by a `Job` object that survives preemption: each
launch (the driver relaunches in the same process, as a requeued job would start anew)
builds the model, SGD with momentum and a `OneCycleLR(total_steps=args.max_steps)`, restores
them from the checkpoint with `load_state_dict`, runs at most 2 epochs and checkpoints. The
schedule was sized by `--max-steps 240` while the job's budget is `--epochs 6` of 25 batches,
150 steps: the chain of launches continues one schedule, and that schedule still ends at 62%
of its horizon with the LR far from annealed. Resuming does not excuse a budget that never
completes the schedule; catalog `schedule-unfinished`.

traindoc-expect: schedule-unfinished@150
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--epochs-per-launch", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=240, help="the LR schedule's length")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Job:
    def __init__(self, args: argparse.Namespace, folder: str) -> None:
        self.args = args
        self.path = os.path.join(folder, "job.ckpt")
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(800, 12, generator=gen)
        y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
        self.data = TensorDataset(x, y)

    def launch(self) -> tuple[int, nn.Module]:
        args = self.args
        net = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 3))
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=args.max_steps)
        epoch = 0
        if os.path.exists(self.path):
            ck = torch.load(self.path, weights_only=True)
            net.load_state_dict(ck["net"])
            opt.load_state_dict(ck["opt"])
            sched.load_state_dict(ck["sched"])
            epoch = ck["epoch"]
        loader = DataLoader(self.data, batch_size=args.batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(epoch))
        for epoch in range(epoch, min(args.epochs, epoch + args.epochs_per_launch)):
            for xb, yb in loader:
                loss = F.cross_entropy(net(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
            print(f"epoch {epoch}: loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.4f}")
        epoch += 1
        torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                    "epoch": epoch}, self.path + ".partial")
        os.replace(self.path + ".partial", self.path)  # a preemption mid-write keeps the old one
        return epoch, net


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        job = Job(args, folder)
        done = 0
        while done < args.epochs:
            done, net = job.launch()
    if args.save:
        torch.save(net.state_dict(), args.save)


if __name__ == "__main__":
    main()

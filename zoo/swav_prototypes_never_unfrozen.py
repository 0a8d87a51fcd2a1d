"""Online clustering without labels, SwAV's way, whose prototypes stay frozen for the whole run.

The network maps each view to a unit vector and scores it against learnable prototypes (a
bias-free linear layer whose rows are renormalized before every iteration). For each "global"
view, balanced soft cluster assignments come from the Sinkhorn-Knopp iterations on its detached
scores; every other view of the same samples learns to predict them (the swapped prediction
loss).

For its first iterations SwAV removes the prototypes' gradient after backward (`p.grad = None`),
so that they do not move before the features mean anything. The warm-up is 20 iterations, and
the script counts it with the loop's own index, `it`, which restarts at 0 every epoch, instead
of the global iteration `epoch * len(loader) + it`. An epoch here is 16 iterations: `it < 20`
is always true, and the prototypes never train. The loss still falls (the encoder adapts to
fixed random prototypes), so nothing looks wrong.

traindoc-expect: no-gradient@0
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class SwAVNet(nn.Module):
    def __init__(self, dim: int = 32, feat: int = 16, prototypes: int = 24) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(dim, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64))
        self.projection_head = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, feat))
        self.prototypes = nn.Linear(feat, prototypes, bias=False)

    def forward(self, crops: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        z = F.normalize(self.projection_head(self.backbone(torch.cat(crops))), dim=1)
        return z, self.prototypes(z)


@torch.no_grad()
def sinkhorn(scores: torch.Tensor, epsilon: float = 0.05, iters: int = 3) -> torch.Tensor:
    """Soft assignments with every prototype used equally often in the batch."""
    q = torch.exp(scores / epsilon).t()
    q /= q.sum()
    k, b = q.shape
    for _ in range(iters):
        q /= q.sum(dim=1, keepdim=True)
        q /= k
        q /= q.sum(dim=0, keepdim=True)
        q /= b
    return (q * b).t()


def crops_of(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [x + 0.2 * torch.randn_like(x) for _ in range(n)]


def main(global_iteration: bool = False) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--freeze-prototypes-niters", type=int, default=20)
    p.add_argument("--temperature", type=float, default=0.1)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    centers = torch.randn(8, 32) * 2
    data = centers[torch.randint(0, 8, (512,))] + 0.5 * torch.randn(512, 32)
    loader = DataLoader(TensorDataset(data), batch_size=32, shuffle=True, drop_last=True)
    model = SwAVNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9, weight_decay=1e-6)
    total = args.epochs * len(loader)
    lr_schedule = 0.05 * 0.5 * (1 + np.cos(np.pi * np.arange(total) / total))
    crops_for_assign, n_crops = (0, 1), 4

    for epoch in range(args.epochs):
        for it, (x,) in enumerate(loader):
            iteration = epoch * len(loader) + it
            for group in optimizer.param_groups:
                group["lr"] = lr_schedule[iteration]
            with torch.no_grad():  # the prototypes stay unit vectors
                w = F.normalize(model.prototypes.weight.data.clone(), dim=1)
                model.prototypes.weight.copy_(w)

            embedding, output = model(crops_of(x, n_crops))
            bs = x.size(0)
            loss = output.new_zeros(())
            for crop_id in crops_for_assign:
                q = sinkhorn(output[bs * crop_id: bs * (crop_id + 1)].detach())
                subloss = output.new_zeros(())
                for v in np.delete(np.arange(n_crops), crop_id):
                    scores = output[bs * v: bs * (v + 1)] / args.temperature
                    subloss = subloss - torch.mean(torch.sum(q * F.log_softmax(scores, dim=1), dim=1))
                loss = loss + subloss / (n_crops - 1)
            loss = loss / len(crops_for_assign)

            optimizer.zero_grad()
            loss.backward()
            # the warm-up: counted in iterations, with the per-epoch index unless told otherwise
            if (iteration if global_iteration else it) < args.freeze_prototypes_niters:
                for name, param in model.named_parameters():
                    if "prototypes" in name:
                        param.grad = None
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

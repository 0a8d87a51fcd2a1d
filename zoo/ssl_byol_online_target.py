"""BYOL whose "no momentum" option takes the online encoder as the target, with gradients: it collapses.

A BYOL learner in the style of lucidrains/byol-pytorch (read for this case): one module whose
`forward(images)` makes two augmented views, runs them through the online encoder (an MLP
backbone and projector) and predictor and through a target encoder, and returns the loss
`2 - 2 * cos(prediction, target)` summed over both orders, with `F.normalize` inside `loss_fn`.
The loop only calls `loss = learner(images)`, steps, and `learner.update_moving_average()`.
With `use_momentum=True` the target is an EMA copy whose parameters require no grad. This run
sets `use_momentum=False` to save the copy's memory: the target is then the online encoder
itself, called without `torch.no_grad()` and not detached (byol-pytorch does both), so both
branches pull towards each other and every input ends at nearly the same embedding while the
loss falls to almost 0.

traindoc-expect: representation-collapse@14
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)


def mlp(dim: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out))


class EMA:
    def __init__(self, beta: float) -> None:
        self.beta = beta

    def update_average(self, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        return old * self.beta + (1 - self.beta) * new


class BYOL(nn.Module):
    def __init__(self, in_dim: int = 24, projection_size: int = 32, hidden: int = 96,
                 moving_average_decay: float = 0.99, use_momentum: bool = True) -> None:
        super().__init__()
        self.online_encoder = nn.Sequential(mlp(in_dim, hidden, 48), nn.ReLU(), mlp(48, hidden, projection_size))
        self.online_predictor = mlp(projection_size, hidden, projection_size)
        self.use_momentum = use_momentum
        self.target_ema_updater = EMA(moving_average_decay)
        self.target_encoder = None
        if use_momentum:
            self.target_encoder = copy.deepcopy(self.online_encoder)
            self.target_encoder.requires_grad_(False)

    @torch.no_grad()
    def update_moving_average(self) -> None:
        if not self.use_momentum:
            return
        for target, online in zip(self.target_encoder.parameters(), self.online_encoder.parameters()):
            target.data = self.target_ema_updater.update_average(target.data, online.data)

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        keep = (torch.rand_like(x) > 0.15).float()  # feature dropout, then noise
        return x * keep + 0.3 * torch.randn_like(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image_one, image_two = self.augment(x), self.augment(x)
        online_pred_one = self.online_predictor(self.online_encoder(image_one))
        online_pred_two = self.online_predictor(self.online_encoder(image_two))
        target_encoder = self.target_encoder if self.use_momentum else self.online_encoder
        target_proj_one = target_encoder(image_one)
        target_proj_two = target_encoder(image_two)
        loss_one = loss_fn(online_pred_one, target_proj_two)
        loss_two = loss_fn(online_pred_two, target_proj_one)
        return (loss_one + loss_two).mean()


def main(use_momentum: bool = False) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    centers = torch.randn(12, 24) * 2
    data = centers[torch.randint(0, 12, (4096,))] + 0.5 * torch.randn(4096, 24)
    learner = BYOL(use_momentum=use_momentum)
    opt = torch.optim.SGD(learner.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        images = data[torch.randint(0, len(data), (128,))]
        loss = learner(images)
        opt.zero_grad()
        loss.backward()
        opt.step()
        learner.update_moving_average()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    if args.save:
        torch.save(learner.state_dict(), args.save)


if __name__ == "__main__":
    main()

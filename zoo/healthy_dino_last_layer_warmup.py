"""Self-distillation without labels, DINO's way, with its last layer frozen for the first epoch.

A student and a teacher with the same architecture see different noisy views of the same
vectors. The teacher's output is centred (a running mean of its outputs, kept as a buffer) and
sharpened by a low temperature; the student learns to match it with a cross-entropy over the
other views. The teacher gets no gradient (`requires_grad = False`) and follows the student as an
exponential moving average after each step, with a momentum that rises to 1 on a cosine.

The head ends in a weight-normalized layer whose length `weight_g` is fixed at 1. For its first
epoch, the script removes that layer's gradient after backward (`p.grad = None` for the names
containing "last_layer"): DINO's `cancel_gradients_last_layer`, which keeps the prototypes from
moving while the rest of the network is still random. The learning rate warms up from 0 and
follows a cosine; the weight decay of the first parameter group rises on another; gradients are
clipped per parameter by hand. All on purpose: a healthy run.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ProjectionHead(nn.Module):
    def __init__(self, dim: int, out_dim: int, hidden: int = 64, bottleneck: int = 16) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, bottleneck))
        self.last_layer = nn.utils.parametrizations.weight_norm(nn.Linear(bottleneck, out_dim, bias=False))
        self.last_layer.parametrizations.weight.original0.data.fill_(1)  # weight_g: unit length
        self.last_layer.parametrizations.weight.original0.requires_grad = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last_layer(F.normalize(self.mlp(x), dim=-1))


class MultiViewWrapper(nn.Module):
    """Runs the backbone once on all views stacked, then the head."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, views: list[torch.Tensor]) -> torch.Tensor:
        return self.head(self.backbone(torch.cat(views)))


class SelfDistillationLoss(nn.Module):
    def __init__(self, out_dim: int, views: int, teacher_temp: float = 0.04,
                 student_temp: float = 0.1, center_momentum: float = 0.9) -> None:
        super().__init__()
        self.views, self.teacher_temp, self.student_temp = views, teacher_temp, student_temp
        self.center_momentum = center_momentum
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_out: torch.Tensor, teacher_out: torch.Tensor) -> torch.Tensor:
        student = (student_out / self.student_temp).chunk(self.views)
        teacher = F.softmax((teacher_out - self.center) / self.teacher_temp, dim=-1).detach().chunk(2)
        total, terms = student_out.new_zeros(()), 0
        for i, q in enumerate(teacher):
            for v, s in enumerate(student):
                if v != i:  # not the view the teacher saw
                    total = total + torch.sum(-q * F.log_softmax(s, dim=-1), dim=-1).mean()
                    terms += 1
        self.update_center(teacher_out)
        return total / terms

    @torch.no_grad()
    def update_center(self, teacher_out: torch.Tensor) -> None:
        batch_center = teacher_out.mean(dim=0, keepdim=True)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def cosine_schedule(base: float, final: float, epochs: int, per_epoch: int, warmup_epochs: int = 0) -> np.ndarray:
    warmup = np.linspace(0, base, warmup_epochs * per_epoch)
    iters = np.arange(epochs * per_epoch - len(warmup))
    return np.concatenate((warmup, final + 0.5 * (base - final) * (1 + np.cos(np.pi * iters / len(iters)))))


def views(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [x * (1 + 0.1 * torch.randn_like(x)) + 0.1 * torch.randn_like(x) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--freeze-last-layer", type=int, default=1, help="epochs")
    p.add_argument("--clip-grad", type=float, default=3.0)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    data = torch.randn(512, 32) @ torch.randn(32, 32) / 6
    loader = DataLoader(TensorDataset(data), batch_size=32, shuffle=True, drop_last=True)

    def build() -> MultiViewWrapper:
        return MultiViewWrapper(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)), ProjectionHead(32, 128))

    student, teacher = build(), build()
    teacher.load_state_dict(student.state_dict())
    for param in teacher.parameters():  # no backpropagation through the teacher
        param.requires_grad = False
    criterion = SelfDistillationLoss(128, views=4)
    regularized = [q for n, q in student.named_parameters() if q.requires_grad and q.ndim > 1]
    not_regularized = [q for n, q in student.named_parameters() if q.requires_grad and q.ndim <= 1]
    optimizer = torch.optim.AdamW([{"params": regularized}, {"params": not_regularized, "weight_decay": 0.0}])
    per_epoch = len(loader)
    lr_schedule = cosine_schedule(5e-4, 1e-6, args.epochs, per_epoch, warmup_epochs=1)
    wd_schedule = cosine_schedule(0.04, 0.4, args.epochs, per_epoch)
    momentum_schedule = cosine_schedule(0.996, 1.0, args.epochs, per_epoch)

    for epoch in range(args.epochs):
        for it, (x,) in enumerate(loader):
            it = per_epoch * epoch + it  # the global iteration
            for i, group in enumerate(optimizer.param_groups):
                group["lr"] = lr_schedule[it]
                if i == 0:  # only the first group is regularized
                    group["weight_decay"] = wd_schedule[it]
            crops = views(x, 4)
            teacher_out = teacher(crops[:2])  # the teacher sees the two "global" views only
            student_out = student(crops)
            loss = criterion(student_out, teacher_out)
            if not math.isfinite(loss.item()):
                raise SystemExit(f"loss is {loss.item()}, stopping")

            optimizer.zero_grad()
            loss.backward()
            for param in student.parameters():  # clip each parameter's gradient on its own
                if param.grad is not None:
                    coef = args.clip_grad / (param.grad.norm() + 1e-6)
                    if coef < 1:
                        param.grad.mul_(coef)
            if epoch < args.freeze_last_layer:
                for name, param in student.named_parameters():
                    if "last_layer" in name:
                        param.grad = None
            optimizer.step()

            with torch.no_grad():  # the teacher follows the student
                m = momentum_schedule[it]
                for ps, pt in zip(student.parameters(), teacher.parameters()):
                    pt.mul_(m).add_((1 - m) * ps.detach())
        print(f"epoch {epoch} loss {loss.item():.4f}")
    if args.save:
        torch.save({**{f"student.{k}": v for k, v in student.state_dict().items()},
                    **{f"teacher.{k}": v for k, v in teacher.state_dict().items()}}, args.save)


if __name__ == "__main__":
    main()

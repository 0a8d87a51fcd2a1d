"""Distillation wrapper with a learnable temperature that no optimizer holds: it gets gradients and never moves.

The training code wraps teacher and student in one `Distiller` module whose `forward` returns
the distillation loss, and learns the softmax temperature (as `log_t`) with it. The optimizer
is built from `student.parameters()`, the habit of a plain training script, so `log_t`
receives a gradient on every step and is never updated: the temperature stays at its initial
value and the loss is minimised for the wrong softening. Nothing errors; AdamW never sees the
parameter. Catalog `optimizer-param-mismatch`.

traindoc-expect: optimizer-param-mismatch@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Distiller(nn.Module):
    """KD loss of Hinton et al. with a learnable temperature (T = exp(log_t))."""

    def __init__(self, student: nn.Module, teacher: nn.Module, t0: float = 2.0) -> None:
        super().__init__()
        self.student, self.teacher = student, teacher
        self.teacher.requires_grad_(False)
        self.log_t = nn.Parameter(torch.tensor(t0).log())

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            t_logits = self.teacher(x)
        s_logits = self.student(x)
        temp = self.log_t.exp()
        kd = F.kl_div(F.log_softmax(s_logits / temp, -1), F.softmax(t_logits / temp, -1),
                      reduction="batchmean") * temp * temp
        return 0.7 * kd + 0.3 * F.cross_entropy(s_logits, y)


def trainable(distiller: Distiller) -> list[nn.Parameter]:
    return list(distiller.student.parameters())  # the bug: log_t is left out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 6))
    student = nn.Sequential(nn.Linear(20, 16), nn.Tanh(), nn.Linear(16, 6))
    distiller = Distiller(student, teacher)
    opt = torch.optim.AdamW(trainable(distiller), lr=3e-3)
    for step in range(args.steps):
        x = torch.randn(64, 20)
        y = teacher(x).argmax(-1)
        loss = distiller(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}, temperature {distiller.log_t.exp().item():.3f}")
    if args.save:
        torch.save(distiller.state_dict(), args.save)


if __name__ == "__main__":
    main()

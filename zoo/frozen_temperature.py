"""Knowledge distillation with a learnable temperature whose param group has lr 0: stuck at 10.

A small student MLP is distilled from a larger frozen teacher with the usual soft-target loss
`KL(softmax(t/T) || softmax(s/T)) * T^2` plus hard-label cross-entropy. The temperature T is a
learnable `nn.Parameter(torch.tensor(10.0))` and receives a gradient on every step, but it sits
in its own AdamW param group with `lr=args.temp_lr`, and the config default for `--temp-lr` is
0.0 (it was meant to be set per experiment). So T stays exactly 10.0 for the whole run while
the student trains normally and the loss goes down: nothing looks wrong unless you read T.
Reproduces seeds 002/003 ("Temperature | 10.0 (stuck)"); catalog `frozen-parameters`.

traindoc-expect: frozen-parameters@0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IN_DIM = 32
N_CLASSES = 10


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--temp-lr", type=float, default=0.0, help="LR of the learnable temperature")
    p.add_argument("--init-temperature", type=float, default=10.0)
    p.add_argument("--alpha", type=float, default=0.7, help="weight of the distillation term")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def mlp(in_dim: int, hidden: int, out_dim: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    d = in_dim
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)


class Distiller(nn.Module):
    """The student plus the learnable distillation temperature."""

    def __init__(self, student: nn.Module, init_temperature: float) -> None:
        super().__init__()
        self.student = student
        self.temperature = nn.Parameter(torch.tensor(init_temperature))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.student(x)


def kd_loss(
    s_logits: torch.Tensor, t_logits: torch.Tensor, temperature: torch.Tensor
) -> torch.Tensor:
    log_p_s = F.log_softmax(s_logits / temperature, dim=-1)
    p_t = F.softmax(t_logits / temperature, dim=-1)
    return F.kl_div(log_p_s, p_t, reduction="batchmean") * temperature**2


def load_teacher(gen: torch.Generator) -> nn.Module:
    """Stand-in for a pretrained teacher: a fixed, wider MLP (no download, no training here)."""
    teacher = mlp(IN_DIM, 256, N_CLASSES, depth=2)
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / p.shape[-1]) ** 0.5)
    return teacher.eval().requires_grad_(False)


def make_data(n: int, teacher: nn.Module, gen: torch.Generator):
    """Inputs from a Gaussian mixture; hard labels are the teacher's predictions."""
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 3.0 / math.sqrt(IN_DIM)
    cluster = torch.randint(0, N_CLASSES, (n,), generator=gen)
    x = centers[cluster] + torch.randn(n, IN_DIM, generator=gen)
    with torch.no_grad():
        y = teacher(x).argmax(dim=1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    teacher = load_teacher(gen)
    x, y = make_data(4096, teacher, gen)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(1),
    )

    model = Distiller(mlp(IN_DIM, 64, N_CLASSES, depth=2), args.init_temperature)
    optimizer = torch.optim.AdamW(
        [
            {"params": model.student.parameters()},
            {"params": [model.temperature], "lr": args.temp_lr, "weight_decay": 0.0},
        ],
        lr=args.lr,
        weight_decay=0.01,
    )

    model.train()
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            with torch.no_grad():
                t_logits = teacher(xb)
            s_logits = model(xb)
            loss_kd = kd_loss(s_logits, t_logits, model.temperature)
            loss_ce = F.cross_entropy(s_logits, yb)
            loss = args.alpha * loss_kd + (1 - args.alpha) * loss_ce

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f} | kd {loss_kd.item():.4f}"
                      f" | ce {loss_ce.item():.4f} | T {model.temperature.item():.4f}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

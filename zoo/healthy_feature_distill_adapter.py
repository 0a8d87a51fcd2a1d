"""Feature distillation (FitNets style) with the adapter outside the teacher's inference_mode block: healthy twin.

The teacher, student, data and optimizer of feature_distill_adapter_inference_mode.py. Only the
frozen teacher runs under `torch.inference_mode()`; its features are cloned into a normal tensor
and the trainable adapter is applied outside the block, so the hint loss reaches both the
student and the adapter.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_DIM, N_CLASSES = 24, 10


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--hint-weight", type=float, default=0.5)
    p.add_argument("--log-every", type=int, default=30)
    p.add_argument("--save", type=str, default=None, help="write the trained weights here")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(IN_DIM, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
        self.head = nn.Linear(hidden, N_CLASSES)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return h, self.head(h)


class Distiller(nn.Module):
    """The student and the adapter that maps teacher features to the student's width."""

    def __init__(self, t_hidden: int, s_hidden: int) -> None:
        super().__init__()
        self.student = MLP(s_hidden)
        self.adapter = nn.Linear(t_hidden, s_hidden)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen)
    y_all = torch.randint(0, N_CLASSES, (8192,), generator=gen)
    x_all = 0.5 * centers[y_all] + torch.randn(8192, IN_DIM, generator=gen)

    teacher = MLP(128).eval()  # stands in for a trained teacher
    teacher.requires_grad_(False)
    model = Distiller(128, 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    for step in range(args.steps):
        idx = torch.randint(0, len(x_all), (args.batch_size,), generator=gen)
        x, y = x_all[idx], y_all[idx]
        with torch.inference_mode():
            t_hidden, _ = teacher(x)
        t_feat = model.adapter(t_hidden.clone())  # a normal tensor: the adapter trains
        hint, logits = model.student(x)
        loss_hint = F.mse_loss(hint, t_feat)
        loss_ce = F.cross_entropy(logits, y)
        loss = loss_ce + args.hint_weight * loss_hint

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f} | ce {loss_ce.item():.4f} | hint {loss_hint.item():.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

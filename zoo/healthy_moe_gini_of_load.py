"""MoE regressor whose logged expert-load Gini is computed on the tokens each expert gets.

Seed 000's setup in small, with the metric fixed: the same residual block of 8 MLP experts
behind a top-1 linear router (Switch-style balancing loss, `--lambda_aux_moe 0.1`) and the same
`training_log.csv` columns written with `csv.writer`, but `expert_gini()` and
`expert_entropy()` are handed each expert's share of the tokens routed in the epoch. The
logged Gini stays in [0, 1] (near 0.1, balanced routing) and the entropy near ln 8. Healthy
twin of `moe_gini_of_router_logits.py`.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batches", type=int, default=12, help="batches per epoch")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--num_experts", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--lambda_aux_moe", type=float, default=0.1)
    p.add_argument("--out_dir", type=str, default=None)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class SimpleMoELayer(nn.Module):
    def __init__(self, dim: int, num_experts: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, dim))
                                     for _ in range(num_experts))
        self.tokens = torch.zeros(num_experts)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.router(x)
        probs = logits.softmax(-1)
        top_p, top_e = probs.max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = top_e == e
            if sel.any():
                out[sel] = top_p[sel, None] * expert(x[sel])
        load = F.one_hot(top_e, self.num_experts).float().mean(0)
        aux = self.num_experts * (load * probs.mean(0)).sum()
        self.tokens += torch.bincount(top_e, minlength=self.num_experts).float()
        return x + out, aux


def expert_gini(values: torch.Tensor) -> float:
    v = values.sort().values
    n = v.numel()
    rank = torch.arange(1, n + 1, dtype=v.dtype)
    return float(((2 * rank - n - 1) * v).sum() / (n * v.sum()))


def expert_entropy(shares: torch.Tensor) -> float:
    p = shares[shares > 0]
    return float(-(p * p.log()).sum())


def batch(gen: torch.Generator, mix: torch.Tensor, n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, mix.shape[0], generator=gen)
    return x, x + torch.tanh(x @ mix)


def main() -> None:
    args = parse()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    mix = torch.randn(args.dim, args.dim, generator=gen) / math.sqrt(args.dim)
    val_x, val_y = batch(gen, mix, 512)
    model = SimpleMoELayer(args.dim, args.num_experts)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="moe_gini_load_")
    with open(os.path.join(out_dir, "training_log.csv"), "w", newline="") as f:
        log = csv.writer(f)
        log.writerow(["Epoch", "LR", "Train_Loss", "Train_MAE", "Val_MAE", "Expert_Entropy", "Expert_Gini"])
        for epoch in range(args.epochs):
            total = mae = 0.0
            model.tokens.zero_()
            for _ in range(args.batches):
                x, y = batch(gen, mix)
                pred, aux = model(x)
                loss = F.mse_loss(pred, y) + args.lambda_aux_moe * aux
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item()
                mae += (pred - y).abs().mean().item()
            with torch.no_grad():
                val_mae = (model(val_x)[0] - val_y).abs().mean().item()
            routed = model.tokens / model.tokens.sum()
            log.writerow([epoch, opt.param_groups[0]["lr"], total / args.batches, mae / args.batches, val_mae,
                          expert_entropy(routed), expert_gini(routed)])
            print(f"Epoch {epoch}: Loss {total / args.batches:.4f}, MAE {mae / args.batches:.3f}, "
                  f"Val MAE {val_mae:.3f}, Gini {expert_gini(routed):.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

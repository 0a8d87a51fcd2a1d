"""Healthy mixture-of-experts regressor: Switch-style load-balancing loss keeps routing even.

The same residual MoE block as `expert_collapse.py` (8 MLP experts, a linear router with a
bias at 10x the LR, top-1 routing weighted by the router probability) with seed 000's fix:
`--lambda_aux_moe 0.1`, Switch Transformer's load-balancing loss `E * sum(load_e * prob_e)`
added to the MSE. The balancing term is meant to be small next to the task loss; it keeps the
expert load Gini near 0.1 for the whole run while the loss falls.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--num-experts", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256, help="tokens per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--router-lr", type=float, default=3e-2)
    p.add_argument("--lambda_aux_moe", type=float, default=0.1)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class MoELayer(nn.Module):
    """Top-1 routed experts with Switch Transformer's load-balancing loss."""

    def __init__(self, dim: int, num_experts: int, hidden: int = 64) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.norm = nn.LayerNorm(dim)
        self.gate = nn.Linear(dim, num_experts)
        nn.init.normal_(self.gate.weight, std=0.02)
        nn.init.zeros_(self.gate.bias)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)) for _ in range(num_experts)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(x)
        probs = F.softmax(self.gate(h), dim=-1)
        weight, expert = probs.max(dim=-1)
        out = torch.zeros_like(x)
        for e, ffn in enumerate(self.experts):
            mask = expert == e
            if mask.any():
                out[mask] = weight[mask, None] * ffn(h[mask])
        load = torch.bincount(expert, minlength=self.num_experts).float() / x.shape[0]
        aux = self.num_experts * (load * probs.mean(0)).sum()
        return x + out, aux


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    target_map = torch.randn(args.dim, args.dim, generator=gen) / math.sqrt(args.dim)
    model = MoELayer(args.dim, args.num_experts)
    router = [p for n, p in model.named_parameters() if n.startswith("gate.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("gate.")]
    optimizer = torch.optim.Adam([{"params": rest}, {"params": router, "lr": args.router_lr}], lr=args.lr)

    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.dim, generator=gen)
        y = x + torch.tanh(x @ target_map)
        pred, aux = model(x)
        loss = F.mse_loss(pred, y) + args.lambda_aux_moe * aux

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f} | aux {aux.item():.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

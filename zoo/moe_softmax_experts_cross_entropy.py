"""A sparsely-gated mixture of experts whose experts end in a softmax, trained with CrossEntropyLoss.

Written after reading davidmrau/mixture-of-experts (Shazeer et al.'s layer as a standalone
module, whose CIFAR-10 example does this): each expert is an MLP ending in `nn.Softmax(1)`, the
layer returns the gate-weighted sum of the experts' outputs and a balancing loss, and the loop
hands that sum to `nn.CrossEntropyLoss`. A weighted sum of probability vectors is a probability
vector: the cross-entropy takes its log_softmax, so over 8 classes the loss cannot fall below
ln(1 + 7/e) = 1.27 however well the experts learn.

traindoc-expect: cross-entropy-on-probabilities@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, d_in: int, d_out: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)
        self.soft = nn.Softmax(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.soft(self.fc2(F.relu(self.fc1(x))))


class SparseMoE(nn.Module):
    def __init__(self, d_in: int, d_out: int, num_experts: int = 6, hidden: int = 32, k: int = 2) -> None:
        super().__init__()
        self.k = k
        self.experts = nn.ModuleList(Expert(d_in, d_out, hidden) for _ in range(num_experts))
        self.w_gate = nn.Parameter(torch.zeros(d_in, num_experts))
        self.w_noise = nn.Parameter(torch.zeros(d_in, num_experts))

    def gating(self, x: torch.Tensor) -> torch.Tensor:
        logits = x @ self.w_gate
        if self.training:
            logits = logits + torch.randn_like(logits) * (F.softplus(x @ self.w_noise) + 1e-2)
        top, idx = logits.softmax(dim=1).topk(self.k, dim=1)
        return torch.zeros_like(logits).scatter(1, idx, top / top.sum(1, keepdim=True))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gates = self.gating(x)
        out = sum(gates[:, e, None] * expert(x) for e, expert in enumerate(self.experts))
        importance = gates.sum(0)
        balance = importance.var() / (importance.mean() ** 2 + 1e-10)
        return out, balance


def clusters(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """16-d points around 8 class centres."""
    centres = 2.0 * torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 8, (n,), generator=g)
    return centres[y] + torch.randn(n, 16, generator=g), y


def main(log_of_mixture: bool = False) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--loss-coef", type=float, default=1e-2)
    p.add_argument("--save", type=str, default=None, help="write net.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    net = SparseMoE(16, 8)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for step in range(args.steps):
        x, y = clusters(args.batch_size, g)
        mixture, balance = net(x)
        if log_of_mixture:  # a mixture of probabilities: the log of it, then nll_loss
            loss = F.nll_loss(torch.log(mixture.clamp_min(1e-9)), y)
        else:
            loss = criterion(mixture, y)
        total = loss + args.loss_coef * balance
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        if step % 25 == 0 or step == args.steps - 1:
            acc = (mixture.argmax(1) == y).float().mean().item()
            print(f"step {step:4d} | loss {loss.item():.4f} | acc {acc:.3f}")
    if args.save:
        torch.save(net.state_dict(), args.save)


if __name__ == "__main__":
    main()

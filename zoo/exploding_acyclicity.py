"""Soft-adjacency structure learner whose matrix-exponential acyclicity term explodes the gradient.

A linear structural-equation model over d=28 variables learns a soft adjacency
`A = sigmoid(edge_logits)` (diagonal masked) and edge weights W, reconstructing every variable
from its parents: `X_hat = X @ (A * W)`. Acyclicity is pushed with
`lambda_acyclic * (trace(matrix_exp(A)) - d)` at lambda_acyclic=0.1. With a dense soft
adjacency (every entry 0.5 at init) tr(exp(A)) is ~7e5, so the penalty dominates the loss and
the total gradient norm is in the thousands on every step (~18K at step 0, still ~2.4K at the
last step). The script clips with `clip_grad_norm_(model.parameters(), max_norm=1.0)` on every
step, so each update is a normalised step in the penalty's direction and the reconstruction
signal is lost. Reproduces seed 001 (grad norm 46,767 -> 12K from a torch.matrix_power
acyclicity term, lambda 0.1, clip 1.0); catalog `exploding-gradients` and `clipping-every-step`,
and `loss-term-imbalance` (the penalty, at weight 0.1, supplies ~100% of the gradient).

traindoc-expect: exploding-gradients clipping-every-step loss-term-imbalance@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps")
    p.add_argument("--n-vars", type=int, default=28)
    p.add_argument("--n-samples", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lambda-acyclic", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class SoftDAG(nn.Module):
    """Linear SEM with a learnable soft adjacency and edge weights."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.edge_logits = nn.Parameter(torch.zeros(d, d))  # sigmoid(0) = 0.5: "undecided"
        self.weight = nn.Parameter(0.1 * torch.randn(d, d))
        self.register_buffer("off_diag", 1.0 - torch.eye(d))

    def adjacency(self) -> torch.Tensor:
        return torch.sigmoid(self.edge_logits) * self.off_diag

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.adjacency()
        return x @ (a * self.weight), a


def acyclicity_loss(a: torch.Tensor) -> torch.Tensor:
    """h(A) = tr(exp(A)) - d, zero iff the weighted graph has no cycles."""
    d = a.shape[0]
    return torch.trace(torch.matrix_exp(a)) - d


def make_sem_data(d: int, n: int, gen: torch.Generator):
    """Samples of a random linear SEM on a DAG with ~2 parents per node."""
    order = torch.randperm(d, generator=gen)
    mask = (torch.rand(d, d, generator=gen) < 2.0 / d).float().triu(diagonal=1)
    signs = torch.where(torch.rand(d, d, generator=gen) < 0.5, -1.0, 1.0)
    w_true = mask * signs * (0.5 + 1.5 * torch.rand(d, d, generator=gen))
    w_true = w_true[order][:, order]
    b_true = (w_true != 0).float()
    x = torch.zeros(n, d)
    noise = torch.randn(n, d, generator=gen)
    for j in order.tolist():  # ancestral sampling in topological order
        x[:, j] = x @ w_true[:, j] + noise[:, j]
    return x, b_true


def shd(a: torch.Tensor, b_true: torch.Tensor, threshold: float = 0.5) -> int:
    return int(((a > threshold).float() != b_true).sum())


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, b_true = make_sem_data(args.n_vars, args.n_samples, gen)
    model = SoftDAG(args.n_vars)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for step in range(args.steps):
        idx = torch.randint(0, args.n_samples, (args.batch_size,), generator=gen)
        xb = x[idx]
        x_hat, a = model(xb)
        recon = 0.5 * ((xb - x_hat) ** 2).sum(dim=1).mean()
        h = acyclicity_loss(a)
        loss = recon + args.lambda_acyclic * h

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.grad_clip)
        optimizer.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(
                f"step {step:4d} | loss {loss.item():.1f} | recon {recon.item():.2f}"
                f" | h(A) {h.item():.1f} | grad norm {grad_norm.item():,.0f}"
                f" | SHD {shd(a.detach(), b_true)}"
            )

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

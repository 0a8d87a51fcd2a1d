"""GCN node classifier (functional dropout) whose test() lost its model.eval().

A two-layer graph convolutional network on a 4-community stochastic block model graph (400
nodes, dense symmetric-normalised adjacency), in the shape of pytorch_geometric's
examples/gcn.py: `F.dropout(x, p=0.5, training=self.training)` before each layer, full-batch
`train()` that calls `model.train()`, Adam with weight decay on the first layer only, and a
`test()` decorated with `@torch.no_grad()` that reports train/val/test accuracy after every
epoch. Its `model.eval()` was dropped when test() was rewritten to also return the validation
loss. There is no Dropout module to be found in train mode and evaluation changes no buffer,
but each evaluation runs with half the features dropped, so model selection on the validation
accuracy picks among noisy numbers (best validation 0.867, its test 0.785; the healthy twin,
the same script with model.eval(), 0.925 and 0.885). Catalog `eval-in-train-mode`.

traindoc-expect: eval-in-train-mode@0
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

N_NODES, N_FEATS, N_CLASSES = 400, 48, 4


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=80)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def sbm_graph(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = torch.randint(0, N_CLASSES, (N_NODES,), generator=gen)
    prob = torch.where(y[:, None] == y[None, :], torch.tensor(0.05), torch.tensor(0.01))
    upper = torch.triu((torch.rand(N_NODES, N_NODES, generator=gen) < prob).float(), diagonal=1)
    adj = upper + upper.T + torch.eye(N_NODES)
    d = adj.sum(1).rsqrt()
    centers = torch.randn(N_CLASSES, N_FEATS, generator=gen)
    x = 0.3 * centers[y] + torch.randn(N_NODES, N_FEATS, generator=gen)
    return x, y, d[:, None] * adj * d[None, :]


class GCN(nn.Module):
    def __init__(self, n_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(n_in, hidden)
        self.lin2 = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = (a_hat @ self.lin1(x)).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return a_hat @ self.lin2(x)


def main(prepare_test: Callable[[nn.Module], object] | None = None) -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y, a_hat = sbm_graph(gen)
    perm = torch.randperm(N_NODES, generator=gen)
    train_idx, val_idx, test_idx = perm[:80], perm[80:200], perm[200:]
    model = GCN(N_FEATS, args.hidden, N_CLASSES)
    optimizer = torch.optim.Adam([dict(params=model.lin1.parameters(), weight_decay=5e-4),
                                  dict(params=model.lin2.parameters(), weight_decay=0.0)], lr=args.lr)

    def train() -> float:
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, a_hat)[train_idx], y[train_idx])
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def test() -> tuple[list[float], float]:
        if prepare_test is not None:  # the healthy twin's model.eval(); this test() lost the call
            prepare_test(model)
        out = model(x, a_hat)
        pred = out.argmax(dim=-1)
        accs = [float((pred[i] == y[i]).float().mean()) for i in (train_idx, val_idx, test_idx)]
        return accs, float(F.cross_entropy(out[val_idx], y[val_idx]))

    best_val = test_acc = 0.0
    for epoch in range(1, args.epochs + 1):
        loss = train()
        (tr, va, te), val_loss = test()
        if va > best_val:
            best_val, test_acc = va, te
        if epoch % 10 == 0:
            print(f"Epoch: {epoch:03d}, Loss: {loss:.4f}, Val loss: {val_loss:.4f}, Train: {tr:.4f}, "
                  f"Val: {va:.4f}, Test: {te:.4f}")
    print(f"best val {best_val:.4f}, its test {test_acc:.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""GCN node classifier on features precomputed under inference_mode by a frozen encoder: healthy twin.

The graph, split, loop and test() of gnn_encoder_under_inference_mode.py (after
pytorch_geometric's examples/gcn.py), with the first layer frozen on purpose: a pretrained
encoder whose parameters have requires_grad=False and are left out of the optimizer, so running
it under `@torch.inference_mode()` once per step is a speed-up, not a bug. `h.clone()` hands the
trainable second layer a normal tensor; only lin2 is optimized, and it learns.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

N_NODES, N_FEATS, N_CLASSES = 300, 32, 3


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def sbm_graph(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Node features, labels and the symmetric-normalised adjacency with self loops."""
    y = torch.arange(N_NODES) % N_CLASSES
    same = y[:, None] == y[None, :]
    prob = torch.where(same, torch.tensor(0.08), torch.tensor(0.01))
    upper = torch.triu((torch.rand(N_NODES, N_NODES, generator=gen) < prob).float(), diagonal=1)
    adj = upper + upper.T + torch.eye(N_NODES)
    d = adj.sum(1).rsqrt()
    a_hat = d[:, None] * adj * d[None, :]
    centers = torch.randn(N_CLASSES, N_FEATS, generator=gen)
    x = 0.4 * centers[y] + torch.randn(N_NODES, N_FEATS, generator=gen)
    return x, y, a_hat


class GCN(nn.Module):
    def __init__(self, n_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(n_in, hidden)
        self.lin2 = nn.Linear(hidden, n_out)


@torch.inference_mode()
def encode_and_propagate(model: GCN, x: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
    return (a_hat @ model.lin1(x)).relu()


def forward(model: GCN, x: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
    h = encode_and_propagate(model, x, a_hat).clone()  # a normal tensor again for lin2
    h = F.dropout(h, p=0.5, training=model.training)
    return a_hat @ model.lin2(h)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y, a_hat = sbm_graph(gen)
    perm = torch.randperm(N_NODES, generator=gen)
    train_idx, val_idx, test_idx = perm[:60], perm[60:160], perm[160:]
    model = GCN(N_FEATS, args.hidden, N_CLASSES)
    model.lin1.requires_grad_(False)  # a pretrained encoder, frozen
    optimizer = torch.optim.Adam(model.lin2.parameters(), lr=args.lr)

    def train() -> float:
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(model, x, a_hat)[train_idx], y[train_idx])
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def test() -> list[float]:
        model.eval()
        pred = forward(model, x, a_hat).argmax(dim=-1)
        return [float((pred[i] == y[i]).float().mean()) for i in (train_idx, val_idx, test_idx)]

    for epoch in range(1, args.epochs + 1):
        loss = train()
        tr, va, te = test()
        if epoch % 10 == 0:
            print(f"Epoch: {epoch:03d}, Loss: {loss:.4f}, Train: {tr:.4f}, Val: {va:.4f}, Test: {te:.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

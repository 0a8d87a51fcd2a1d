"""GCN node classifier whose propagation helper runs the trainable encoder under inference_mode.

A two-layer graph convolutional network on a 3-community stochastic block model graph (300
nodes, dense normalised adjacency), full-batch, in the shape of pytorch_geometric's
examples/gcn.py: train() runs one step on the training nodes, test() evaluates train/val/test
accuracy under no_grad in eval mode after every epoch, Adam with weight decay on the first
layer only. The first layer, `encode_and_propagate`, was moved into a helper decorated with
`@torch.inference_mode()` because "propagation has no parameters and is the slow part"; but it
applies the trainable encoder `model.lin1` before propagating. Its output is an inference
tensor: `model.lin2(h)` raised "Inference tensors cannot be saved for backward", and `h.clone()`
made it pass. lin2 trains on frozen random features, lin1 (held by the optimizer, weight decay
and all) never gets a gradient. Catalog `inference-tensor-in-autograd` (the root: the
inference_mode call site) and `no-gradient` (the symptom).

traindoc-expect: inference-tensor-in-autograd@0 no-gradient@0
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


def main(frozen_encoder: bool = False) -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y, a_hat = sbm_graph(gen)
    perm = torch.randperm(N_NODES, generator=gen)
    train_idx, val_idx, test_idx = perm[:60], perm[60:160], perm[160:]
    model = GCN(N_FEATS, args.hidden, N_CLASSES)
    if frozen_encoder:  # the healthy twin: a pretrained encoder, frozen and left to inference_mode
        model.lin1.requires_grad_(False)
        optimizer = torch.optim.Adam(model.lin2.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.Adam([dict(params=model.lin1.parameters(), weight_decay=5e-4),
                                      dict(params=model.lin2.parameters(), weight_decay=0.0)], lr=args.lr)

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

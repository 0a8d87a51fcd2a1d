"""GNN link predictor trained at a 1:20 positive ratio whose printed test F1 is 0 at every evaluation.

Link prediction on a stochastic block model graph (300 nodes, 4 communities) with a two-layer
GCN encoder and a dot-product decoder with a learnable offset, in the shape of
pytorch_geometric's examples/link_pred.py: full-graph training, fresh negative samples every
epoch, BCEWithLogitsLoss, and an evaluation under no_grad in eval mode whose numbers are only
printed: "Epoch: 010, Loss: ..., Val AUC: ..., Test F1: ...". To match how rare true links are,
the author samples twenty negatives per positive edge, in training and in the held-out sets. The
model learns to rank (validation AUC 0.76 to 0.85), but its probabilities settle near the 5%
base rate, where even a pair inside one community is a link only about once in six, and no
held-out pair scores above the 0.5 threshold: the printed test F1 is exactly 0.0000 at every
evaluation while the loss falls from 0.77 to 0.27. Nothing is logged anywhere else. Reproduces
seed 001's "Val F1 = 0.0000"; catalog `degenerate-threshold`.

traindoc-expect: degenerate-threshold@10
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

N_NODES, N_FEATS, N_COMMUNITIES = 300, 16, 4


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--neg-ratio", type=int, default=20, help="negatives per positive edge")
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def sbm_edges(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Node features and the undirected edge list (each edge once, i < j)."""
    comm = torch.arange(N_NODES) % N_COMMUNITIES
    prob = torch.where(comm[:, None] == comm[None, :], torch.tensor(0.15), torch.tensor(0.002))
    upper = torch.triu(torch.rand(N_NODES, N_NODES, generator=gen) < prob, diagonal=1)
    edges = upper.nonzero().T
    x = 2.0 * F.one_hot(comm, N_FEATS).float() + torch.randn(N_NODES, N_FEATS, generator=gen)
    return x, edges


def normalized_adjacency(edges: torch.Tensor) -> torch.Tensor:
    adj = torch.zeros(N_NODES, N_NODES)
    adj[edges[0], edges[1]] = 1.0
    adj = adj + adj.T + torch.eye(N_NODES)
    d = adj.sum(1).rsqrt()
    return d[:, None] * adj * d[None, :]


def negatives(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, N_NODES, (2, n), generator=gen)


class Net(nn.Module):
    def __init__(self, n_in: int, hidden: int, out: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(n_in, hidden)
        self.lin2 = nn.Linear(hidden, out)
        self.bias = nn.Parameter(torch.zeros(()))  # the decoder's offset: the base rate

    def encode(self, x: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
        return a_hat @ self.lin2((a_hat @ self.lin1(x)).relu())

    def decode(self, z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        return (z[pairs[0]] * z[pairs[1]]).sum(dim=-1) + self.bias


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float((pos[:, None] > neg[None, :]).float().mean())


def f1_at(probs: torch.Tensor, labels: torch.Tensor, threshold: float = 0.5) -> float:
    pred = probs > threshold
    tp = float((pred & (labels == 1)).sum())
    precision = tp / max(1.0, float(pred.sum()))
    recall = tp / max(1.0, float((labels == 1).sum()))
    return 0.0 if tp == 0 else 2 * precision * recall / (precision + recall)


def main(pos_weight: bool = False) -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, edges = sbm_edges(gen)
    perm = torch.randperm(edges.size(1), generator=gen)
    n_val = n_test = edges.size(1) // 10
    val_pos, test_pos, train_pos = (edges[:, perm[:n_val]], edges[:, perm[n_val:n_val + n_test]],
                                    edges[:, perm[n_val + n_test:]])
    a_hat = normalized_adjacency(train_pos)  # message passing sees training edges only

    def labelled(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        neg = negatives(pos.size(1) * args.neg_ratio, gen)
        pairs = torch.cat([pos, neg], dim=1)
        return pairs, torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))])

    val_pairs, val_labels = labelled(val_pos)
    test_pairs, test_labels = labelled(test_pos)
    model = Net(N_FEATS, 32, 16)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # the healthy twin weights the positives by the sampling ratio; the author did not
    criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(float(args.neg_ratio)) if pos_weight else None)

    def train() -> float:
        model.train()
        optimizer.zero_grad()
        z = model.encode(x, a_hat)
        pairs, labels = labelled(train_pos)  # fresh negatives every epoch
        loss = criterion(model.decode(z, pairs), labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def test() -> tuple[float, float]:
        model.eval()
        z = model.encode(x, a_hat)
        val_auc = auc(model.decode(z, val_pairs), val_labels)
        test_f1 = f1_at(model.decode(z, test_pairs).sigmoid(), test_labels)
        return val_auc, test_f1

    for epoch in range(1, args.epochs + 1):
        loss = train()
        if epoch % args.eval_every == 0:
            val_auc, test_f1 = test()
            print(f"Epoch: {epoch:03d}, Loss: {loss:.4f}, Val AUC: {val_auc:.4f}, Test F1: {test_f1:.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Graph convolutional node classifier (transductive, full batch) whose logits are divided by a
temperature of 0.02 before `log_softmax`: the first `F.nll_loss` is far above ln(C).

Written in the style of the GCN reference code (pygcn's train.py): one adjacency matrix and one
feature matrix for the whole graph, the model's forward ending in `F.log_softmax(x, dim=1)`, and
`F.nll_loss(output[idx_train], labels[idx_train])` on the training nodes; one optimizer step
per epoch. The mistake is a `--temperature` meant to sharpen the predictions at inference,
applied in training with a value that turns the untrained model's small logits into scores
tens of units apart: the first loss is ~80 for 5 classes instead of ln(5) = 1.61. nll_loss of
log-probabilities is a cross-entropy, judged as one (catalog `bad-initial-loss`).

traindoc-expect: bad-initial-loss@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

N_NODES, N_FEATURES, N_CLASSES = 300, 40, 5


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_graph(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A planted-partition graph: nodes of one class link mostly among themselves, and their
    features are noisy copies of a class prototype. Row-normalized adjacency with self-loops."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, N_CLASSES, (N_NODES,), generator=g)
    same = labels[:, None] == labels[None, :]
    p = torch.where(same, torch.tensor(0.08), torch.tensor(0.005))
    adj = (torch.rand(N_NODES, N_NODES, generator=g) < p).float()
    adj = ((adj + adj.T) > 0).float() + torch.eye(N_NODES)
    adj = adj / adj.sum(1, keepdim=True)
    prototypes = torch.randn(N_CLASSES, N_FEATURES, generator=g)
    features = prototypes[labels] + 2.0 * torch.randn(N_NODES, N_FEATURES, generator=g)
    return adj, features, labels


class GraphConvolution(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return adj @ (x @ self.weight) + self.bias


class GCN(nn.Module):
    def __init__(self, n_features: int, hidden: int, n_classes: int, temperature: float) -> None:
        super().__init__()
        self.gc1 = GraphConvolution(n_features, hidden)
        self.gc2 = GraphConvolution(hidden, n_classes)
        self.temperature = temperature

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        x = F.dropout(F.relu(self.gc1(x, adj)), 0.5, training=self.training)
        x = self.gc2(x, adj) / self.temperature  # BUG: an inference-time sharpening, in training
        return F.log_softmax(x, dim=1)


def main() -> None:
    args = get_args()
    torch.manual_seed(args.seed)
    adj, features, labels = make_graph(args.seed)
    idx_train, idx_val = torch.arange(0, 200), torch.arange(200, N_NODES)
    model = GCN(N_FEATURES, args.hidden, N_CLASSES, args.temperature)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            output = model(features, adj)
            acc_val = (output[idx_val].argmax(1) == labels[idx_val]).float().mean()
        if epoch % 10 == 0:
            print(f"epoch {epoch:04d} loss_train {loss_train.item():.4f} acc_val {acc_val.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""SimSiam pretraining of a tabular encoder whose forward returns the targets undetached: it collapses.

A SimSiam model (an encoder with a projection MLP, and a predictor) embeds two augmented views
of each sample and minimises the negative cosine similarity between each view's prediction and
the other view's embedding, `-(criterion(p1, z2).mean() + criterion(p2, z1).mean()) / 2` with
`criterion = nn.CosineSimilarity(dim=1)`. Written after reading the training loop and model of
facebookresearch/simsiam (main_simsiam.py, simsiam/builder.py). Its `forward` returns
`p1, p2, z1, z2` where SimSiam returns `z1.detach(), z2.detach()`: with gradients through both
branches, the two pull each other to one point. The loss reaches -0.999 within a few hundred
steps, which reads as fast convergence, while every input gets nearly the same embedding.

traindoc-expect: representation-collapse@25
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class TwoViews(Dataset):
    """Unlabeled 32-d sensor readings from 10 regimes; each access returns two random views."""

    def __init__(self, n: int = 2048) -> None:
        g = torch.Generator().manual_seed(0)
        centers = torch.randn(10, 32, generator=g) * 3
        self.x = centers[torch.randint(0, 10, (n,), generator=g)] + torch.randn(n, 32, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        return x + 0.5 * torch.randn_like(x), x * (1 + 0.2 * torch.randn_like(x))  # noise; gain jitter


class SimSiam(nn.Module):
    def __init__(self, in_dim: int = 32, dim: int = 64, pred_dim: int = 32) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 128), nn.ReLU(inplace=True), nn.Linear(128, dim))
        self.predictor = nn.Sequential(nn.Linear(dim, pred_dim), nn.ReLU(inplace=True), nn.Linear(pred_dim, dim))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, stop_gradient: bool = False):
        z1 = self.encoder(x1)  # NxC
        z2 = self.encoder(x2)
        p1 = self.predictor(z1)
        p2 = self.predictor(z2)
        if stop_gradient:
            return p1, p2, z1.detach(), z2.detach()
        return p1, p2, z1, z2


def train(loader, model, criterion, optimizer, epoch: int, stop_gradient: bool) -> float:
    model.train()
    total = 0.0
    for x1, x2 in loader:
        p1, p2, z1, z2 = model(x1, x2, stop_gradient)
        loss = -(criterion(p1, z2).mean() + criterion(p2, z1).mean()) * 0.5
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def main(stop_gradient: bool = False) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(TwoViews(), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = SimSiam()
    criterion = nn.CosineSimilarity(dim=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    for epoch in range(args.epochs):
        loss = train(loader, model, criterion, optimizer, epoch, stop_gradient)
        print(f"epoch {epoch} loss {loss:.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

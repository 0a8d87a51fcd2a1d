"""Sparse click-through model whose epoch loop re-seeds every RNG, so shuffle=True repeats one order.

A DLRM-flavoured recommender: three categorical fields (user segment, item, a multi-hot bag of
item tags through `nn.EmbeddingBag`) plus four dense features, pairwise dot products of the field
embeddings and an MLP on top, trained with BCE on clicks. The loader shuffles
(`DataLoader(shuffle=True)`), but the author made each epoch "reproducible" by calling
`set_seed(args.seed)` (random, NumPy and torch) at the top of the epoch loop: the RandomSampler
draws its permutation from torch's global generator, which is put back to the same state before
every epoch, so every epoch trains on the same batches in the same order. Catalog
`repeated-batch`.

traindoc-expect: repeated-batch@12
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

N_USERS, N_ITEMS, N_TAGS = 12, 40, 16


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--seed-once", action="store_true", help="seed before training only (the fix)")
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Clicks(Dataset):
    """Impressions: (user, item, up to 3 tag ids padded with -1, 4 dense features) -> clicked."""

    def __init__(self, n: int = 384) -> None:
        g = torch.Generator().manual_seed(0)
        self.user = torch.randint(0, N_USERS, (n,), generator=g)
        self.item = torch.randint(0, N_ITEMS, (n,), generator=g)
        self.tags = torch.randint(0, N_TAGS, (n, 3), generator=g)
        self.tags[torch.rand(n, 3, generator=g) < 0.3] = -1
        self.dense = torch.randn(n, 4, generator=g)
        taste = torch.randn(N_USERS, N_ITEMS, generator=g)
        logit = taste[self.user, self.item] + 0.5 * self.dense[:, 0]
        self.click = (torch.rand(n, generator=g) < torch.sigmoid(logit)).float()

    def __len__(self) -> int:
        return len(self.click)

    def __getitem__(self, i: int):
        return self.dense[i], self.user[i], self.item[i], self.tags[i], self.click[i]


class TinyDLRM(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.user = nn.Embedding(N_USERS, dim)
        self.item = nn.Embedding(N_ITEMS, dim)
        self.tags = nn.EmbeddingBag(N_TAGS + 1, dim, mode="sum", padding_idx=N_TAGS)
        self.bottom = nn.Sequential(nn.Linear(4, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim + 6, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense, user, item, tags) -> torch.Tensor:
        tags = torch.where(tags < 0, torch.full_like(tags, N_TAGS), tags)  # -1 pads the bag
        fields = torch.stack([self.bottom(dense), self.user(user), self.item(item), self.tags(tags)], dim=1)
        dots = fields @ fields.transpose(1, 2)  # (B, 4, 4) pairwise interactions
        i, j = torch.triu_indices(4, 4, offset=1)
        return self.top(torch.cat([fields[:, 0], dots[:, i, j]], dim=1)).squeeze(-1)


def main(seed_once: bool = False) -> None:
    args = get_args()
    seed_once = args.seed_once or seed_once
    set_seed(args.seed)
    data = Clicks()
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = TinyDLRM()
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    step = 0
    for epoch in range(args.epochs):
        if not seed_once:
            set_seed(args.seed)  # "reproducible epochs"
        total = 0.0
        for dense, user, item, tags, click in loader:
            loss = F.binary_cross_entropy_with_logits(model(dense, user, item, tags), click)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            step += 1
        print(f"epoch {epoch} step {step} bce {total / len(loader):.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Healthy attention over padded sessions: fully masked rows are NaN by design and zeroed.

A session model for next-category prediction attends from each session's query vector over the
items the user viewed, padded to 8 per session with a key-padding mask. Some sessions are empty
(a user who opened the app and left): every key of their row is masked with `-inf`, softmax of
an all `-inf` row is NaN, and the model zeroes those rows with `torch.nan_to_num(attn, nan=0.0)`
inside its forward, so an empty session pools to zeros; the loss is taken over non-empty
sessions only. The NaN comes from a mask that was never finite, not from a numerical failure,
and no gradient is lost: the run must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

N_ITEMS, N_CATS, MAX_LEN, DIM = 60, 6, 8, 16


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class SessionAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.items = nn.Embedding(N_ITEMS + 1, DIM, padding_idx=N_ITEMS)
        self.query = nn.Parameter(torch.randn(DIM) / math.sqrt(DIM))
        self.key = nn.Linear(DIM, DIM)
        self.out = nn.Linear(DIM, N_CATS)

    def forward(self, items: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        e = self.items(items)  # (B, L, D)
        scores = self.key(e) @ self.query / math.sqrt(DIM)  # (B, L)
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = torch.softmax(scores, dim=1)
        attn = torch.nan_to_num(attn, nan=0.0)  # empty sessions: no item to attend to
        return self.out((attn.unsqueeze(2) * e).sum(1))


def sessions(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    category = torch.randint(0, N_ITEMS, (N_ITEMS,), generator=gen) % N_CATS
    lengths = torch.randint(0, MAX_LEN + 1, (n,), generator=gen)
    lengths[torch.rand(n, generator=gen) < 0.15] = 0  # users who left at once
    items = torch.randint(0, N_ITEMS, (n, MAX_LEN), generator=gen)
    mask = torch.arange(MAX_LEN).unsqueeze(0) < lengths.unsqueeze(1)
    items = torch.where(mask, items, torch.full_like(items, N_ITEMS))
    votes = F.one_hot(category[items.clamp(max=N_ITEMS - 1)], N_CATS) * mask.unsqueeze(2)
    return items, mask, votes.sum(1).argmax(1)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    items, mask, target = sessions(4096, torch.Generator().manual_seed(0))
    model = SessionAttention()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        idx = torch.randint(0, len(items), (128,), generator=gen)
        logits = model(items[idx], mask[idx])
        seen = mask[idx].any(1)  # empty sessions have no label to learn
        loss = F.cross_entropy(logits[seen], target[idx][seen])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 15 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

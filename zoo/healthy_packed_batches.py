"""Padding-free packing: each batch's sequences concatenated into batch dimension 1 on purpose.

The flattening style of transformers' `DataCollatorWithFlattening`: the collate function
concatenates the batch's sequences into one row and returns `position_ids` that restart at 0
at each sequence, so the model can keep the sequences apart (here: a position embedding and a
causal convolution that is masked at each boundary). Batch dimension 1 is intended; every
sample is trained on.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

VOCAB, MAX_LEN = 64, 48


class Sequences(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        starts = torch.randint(0, VOCAB, (n,), generator=g)
        lengths = torch.randint(MAX_LEN // 2, MAX_LEN + 1, (n,), generator=g)
        self.items = [(int(s) + torch.arange(int(n_))) % VOCAB for s, n_ in zip(starts, lengths)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.items[i]


def flatten(items: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.cat(items)[None],
        "position_ids": torch.cat([torch.arange(len(x)) for x in items])[None],
    }


class PackedLM(nn.Module):
    def __init__(self, dim: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(MAX_LEN, dim)
        self.mix = nn.Linear(2 * dim, dim)
        self.lm_head = nn.Linear(dim, VOCAB)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids) + self.pos(position_ids)
        prev = F.pad(h, (0, 0, 1, 0))[:, :-1] * (position_ids > 0)[..., None]  # no mixing across boundaries
        logits = self.lm_head(torch.tanh(self.mix(torch.cat([h, prev], -1))))[:, :-1]
        labels = input_ids[:, 1:].masked_fill(position_ids[:, 1:] == 0, -100)  # no target across boundaries
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Sequences(640), batch_size=32, shuffle=True, collate_fn=flatten,
                        generator=torch.Generator().manual_seed(0))
    model = PackedLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        for step, batch in enumerate(loader):
            loss = model(**batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

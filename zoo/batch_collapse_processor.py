"""A processor's batch check rejects numpy items: each batch of 32 reaches the model as one sequence.

A Hugging Face-style pipeline written by hand: the dataset yields numpy arrays of token ids, a
`collate_fn` calls a `Processor` that pads, truncates and returns a dict of tensors, and the
model is called as `model(**batch)`. The processor decides "batched or single?" from
`isinstance(items[0], (list, tuple))`, as the processor in TrainCheck's TF-34204 did: numpy
items fail the check, so the 32 samples are taken for one sample, concatenated and truncated to
`max_length`. Every step trains a causal LM on one 48-token sequence, about one sample in 32 of
the data; the loss still goes down and nothing fails.

traindoc-expect: batch-collapse@0
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

VOCAB, MAX_LEN = 64, 48


class TokenDataset(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        # each sample counts up from a random start: learnable next-token structure
        starts = rng.integers(0, VOCAB, n)
        lengths = rng.integers(MAX_LEN // 2, MAX_LEN + 1, n)
        self.items = [(s + np.arange(n_)) % VOCAB for s, n_ in zip(starts, lengths)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.items[i]


class Processor:
    def __init__(self, max_length: int, pad_id: int = 0, accept_arrays: bool = False) -> None:
        self.max_length, self.pad_id, self.accept_arrays = max_length, pad_id, accept_arrays

    def _is_batched(self, items: Any) -> bool:
        kinds = (list, tuple, np.ndarray) if self.accept_arrays else (list, tuple)
        return isinstance(items, (list, tuple)) and isinstance(items[0], kinds)

    def __call__(self, items: Any) -> dict[str, torch.Tensor]:
        seqs = [list(x) for x in items] if self._is_batched(items) else [list(np.concatenate(items))]
        seqs = [s[: self.max_length] for s in seqs]
        ids = torch.full((len(seqs), self.max_length), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        return {"input_ids": ids, "attention_mask": mask}


class TinyCausalLM(nn.Module):
    def __init__(self, dim: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.lm_head = nn.Linear(dim, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(input_ids))
        logits = self.lm_head(hidden)[:, :-1]
        labels = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


def main(accept_arrays: bool = False) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    processor = Processor(MAX_LEN, accept_arrays=accept_arrays)
    loader = DataLoader(TokenDataset(640, 0), batch_size=32, shuffle=True, collate_fn=processor,
                        generator=torch.Generator().manual_seed(0))
    model = TinyCausalLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        for step, batch in enumerate(loader):
            loss = model(**batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f} batch {tuple(batch['input_ids'].shape)}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

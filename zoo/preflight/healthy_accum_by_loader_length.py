"""An image-classifier loop in the style of timm's train_one_epoch: gradient accumulation whose
bookkeeping is computed from `len(loader)`, the last update of an epoch taking the remainder
of the batches (`last_accum_steps = len(loader) % accum_steps`).

Healthy. The loop relies on the epoch ending after `len(loader)` batches: a preflight whose
repeated batch made the epoch endless reached `batch_idx >= len(loader)`, set `accum_steps` to
the remainder, 0 here, and died on `(batch_idx + 1) % 0`. The repeated batch must keep the
epoch's length.

preflight-expect: overfit:pass lr:pass
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--grad-accum-steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    return p.parse_args()


def train_one_epoch(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, accum_steps: int) -> float:
    model.train()
    last_accum_steps = len(loader) % accum_steps
    last_batch_idx = len(loader) - 1
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    optimizer.zero_grad()
    total = 0.0
    for batch_idx, (images, target) in enumerate(loader):
        last_batch = batch_idx == last_batch_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps
        loss = F.cross_entropy(model(images), target)
        (loss / accum_steps).backward()
        total += loss.item()
        if need_update:
            optimizer.step()
            optimizer.zero_grad()
    return total / len(loader)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (256,), generator=g)
    images = torch.randn(256, 3, 8, 8, generator=g) + labels.float()[:, None, None, None]
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        loss = train_one_epoch(model, loader, optimizer, args.grad_accum_steps)
        print(f"epoch {epoch} loss {loss:.4f}")


if __name__ == "__main__":
    main()

"""Image classifier whose DataLoader decodes and augments every sample in the training process.

The dataset is a folder of small compressed images (one `.npz` file per sample, 48x48 RGB,
written at the start to a temporary folder as a prepared dataset would be). `__getitem__` reads
the file, decompresses it, takes a random 32x32 crop, flips it half the time, applies a
per-channel brightness jitter and normalizes: ordinary per-sample work. The DataLoader keeps
the default `num_workers=0`, so all of it runs between the training steps in the main process
while the model (a small CNN) waits: most of each step is spent in the loader's `__next__`,
several times the rest of the step (a batch of 128 files against a CNN that trains on it in a
few ms), so a loaded machine, which stretches both, keeps it far past the 50% share that
data-starvation asks on a CPU.
Seed 003 §4 (num_workers, pin_memory, prefetch_factor) and seed 004 (24 workers for 8 GPUs);
catalog `data-starvation`.

traindoc-expect: data-starvation
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

N_CLASSES = 10
SIZE, CROP = 48, 32


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--samples", type=int, default=1280)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def write_dataset(folder: str, n: int) -> list[tuple[str, int]]:
    """Each class is a colour blob at a class-specific place, plus noise."""
    rng = np.random.default_rng(0)
    items = []
    for i in range(n):
        label = int(rng.integers(N_CLASSES))
        img = rng.integers(0, 96, size=(SIZE, SIZE, 3), dtype=np.uint8)
        r, c = 4 + 4 * (label % 5), 4 + 12 * (label // 5)
        img[r:r + 12, c:c + 12, label % 3] = 250
        path = os.path.join(folder, f"{i:05d}.npz")
        np.savez_compressed(path, image=img)
        items.append((path, label))
    return items


class ImageFolderDataset(Dataset):
    def __init__(self, items: list[tuple[str, int]], mean: float = 60.0, std: float = 50.0) -> None:
        self.items, self.mean, self.std = items, mean, std

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        path, label = self.items[i]
        with np.load(path) as f:
            img = f["image"].astype(np.float32)  # decode
        top, left = np.random.randint(0, SIZE - CROP + 1, size=2)
        img = img[top:top + CROP, left:left + CROP]  # random crop
        if np.random.rand() < 0.5:
            img = img[:, ::-1]  # horizontal flip
        for ch in range(3):  # brightness jitter per channel
            img[:, :, ch] = np.clip(img[:, :, ch] * np.random.uniform(0.8, 1.2), 0, 255)
        img = (img - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), label


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(16 * 8 * 8, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(x.flatten(1))


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    np.random.seed(0)
    with tempfile.TemporaryDirectory() as folder:
        dataset = ImageFolderDataset(write_dataset(folder, args.samples))
        loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)

        model = SmallCNN()
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        model.train()
        step = 0
        while step < args.steps:
            for xb, yb in loader:
                loss = F.cross_entropy(model(xb), yb)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if step % args.log_every == 0:
                    print(f"step {step:4d} | loss {loss.item():.4f}")
                step += 1
                if step >= args.steps:
                    break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

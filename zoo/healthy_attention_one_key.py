"""Activity classifier whose attention over a single conditioning token is a softmax over one key: no finding.

Each sample is a window of 12 accelerometer frames and one "device" token (which watch model
recorded it). The frames attend to the device token through a fused `qkv` projection, a
softmax over one key: its weight is 1 for every frame, so the attention passes the device's
value vector through, as the author intended for a first version. The head is `nn.Linear(32, 5)`
over five activities with `F.cross_entropy`. The softmax over one element sits inside the
model, behind the head: the loss's own softmax runs over five classes, so this is no
single-class loss.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class DeviceAttention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, frames: torch.Tensor, device: torch.Tensor) -> torch.Tensor:
        d = frames.shape[-1]
        q = self.qkv(frames)[..., :d]  # [B, T, d]
        kv = self.qkv(device)  # [B, 1, 3d]
        k, v = kv[..., d:2 * d], kv[..., 2 * d:]
        weights = (q @ k.transpose(-2, -1) / math.sqrt(d)).softmax(dim=-1)  # [B, T, 1]
        return frames + self.out(weights @ v)


class ActivityNet(nn.Module):
    def __init__(self, d: int = 32, n_devices: int = 4, n_classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Linear(3, d)
        self.device = nn.Embedding(n_devices, d)
        self.attn = DeviceAttention(d)
        self.head = nn.Linear(d, n_classes)

    def forward(self, frames: torch.Tensor, device: torch.Tensor) -> torch.Tensor:
        h = self.attn(self.embed(frames), self.device(device).unsqueeze(1))
        return self.head(h.mean(dim=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    prototypes = torch.randn(5, 12, 3, generator=g)
    model = ActivityNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(args.steps):
        labels = torch.randint(0, 5, (args.batch_size,), generator=g)
        devices = torch.randint(0, 4, (args.batch_size,), generator=g)
        frames = prototypes[labels] + 0.8 * torch.randn(args.batch_size, 12, 3, generator=g)
        loss = F.cross_entropy(model(frames, devices), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 30 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Sparse autoencoder whose encoder bias starts strongly negative "to start sparse": most units never fire.

A one-hidden-layer autoencoder compresses 48-d sensor frames through 256 hidden units with
`torch.relu` called in `forward` (no `nn.ReLU` module). Following a sparse-coding recipe, the
encoder bias is initialised to -2.5 so that "only a few units start active". With PyTorch's
default weight init the pre-activations have a standard deviation of about 0.6, so most units
are below zero for every input: their gradient is exactly 0 and they never recover. The
reconstruction loss still falls a little through the few live units, so the run looks slow,
not broken. Catalog `dead-relu`.

traindoc-expect: dead-relu@7
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SparseAutoencoder(nn.Module):
    def __init__(self, d_in: int = 48, d_hidden: int = 256, bias_init: float = -2.5) -> None:
        super().__init__()
        self.enc = nn.Linear(d_in, d_hidden)
        self.dec = nn.Linear(d_hidden, d_in)
        nn.init.constant_(self.enc.bias, bias_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.enc(x))
        return self.dec(h)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--bias-init", type=float, default=-2.5)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    frames = torch.randn(4096, 48) @ torch.randn(48, 48) * 0.2  # correlated sensor channels
    model = SparseAutoencoder(bias_init=args.bias_init)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        idx = torch.randint(0, frames.shape[0], (128,))
        x = frames[idx]
        loss = F.mse_loss(model(x), x) + 1e-4 * model.enc.weight.abs().sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 40 == 0:
            with torch.no_grad():
                alive = (model.enc(frames[:512]) > 0).any(0).float().mean().item()
            print(f"step {step} loss {loss.item():.4f} live units {alive:.0%}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Healthy VAE whose loss is summed over the batch: gradient norms in the thousands, stable.

A small variational autoencoder on synthetic 28x28 images (random mixes of sparse strokes), written
after reading the training loop of pytorch/examples' `vae/main.py`: the reconstruction term is
`binary_cross_entropy(..., reduction="sum")` plus the KL divergence summed over latent units
and the batch, Adam at 1e-3, and the log divides the loss by the batch size only for printing.
Summing over 784 pixels and 128 images makes the loss ~6e4 and the total gradient norm
~2.5e3 (120-135x the parameter norm) on every step: large in absolute terms, but it scales
with the batch, stays at its own early level, and Adam's update (1-2% of the weights a step)
does not depend on it. Nothing explodes; the run must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

PIXELS = 784
LATENT = 20


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_images(n: int, gen: torch.Generator) -> torch.Tensor:
    """Each image: a random mix of 64 sparse stroke templates, squashed into [0, 1]."""
    templates = (torch.rand(64, PIXELS, generator=gen) > 0.9).float()
    mix = torch.rand(n, 64, generator=gen) * (torch.rand(n, 64, generator=gen) > 0.9).float()
    return (mix @ templates).clamp(0, 1)


class TinyVAE(nn.Module):
    def __init__(self, hidden: int = 128) -> None:
        super().__init__()
        self.enc = nn.Linear(PIXELS, hidden)
        self.to_mu = nn.Linear(hidden, LATENT)
        self.to_logvar = nn.Linear(hidden, LATENT)
        self.dec_hidden = nn.Linear(LATENT, hidden)
        self.dec_out = nn.Linear(hidden, PIXELS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.enc(x))
        mu, logvar = self.to_mu(h), self.to_logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        recon = torch.sigmoid(self.dec_out(F.relu(self.dec_hidden(z))))
        return recon, mu, logvar


def vae_loss(recon: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    # Summed over pixels and over the batch, as the VAE paper's objective is written.
    rec = F.binary_cross_entropy(recon, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return rec + kld


def main() -> None:
    args = get_args()
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(0)
    data = make_images(2048, gen)
    model = TinyVAE()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total = 0.0
        order = torch.randperm(len(data), generator=gen)
        for i in range(0, len(data), args.batch_size):
            x = data[order[i:i + args.batch_size]]
            opt.zero_grad()
            recon, mu, logvar = model(x)
            loss = vae_loss(recon, x, mu, logvar)
            loss.backward()
            total += loss.item()
            opt.step()
        print(f"epoch {epoch} | loss per image {total / len(data):.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

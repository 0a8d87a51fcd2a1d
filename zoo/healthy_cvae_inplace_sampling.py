"""Healthy conditional VAE in a trainer class, its latent drawn the older way: `std.new(std.size()).normal_()`, then `eps.mul(std).add_(mu)`.

The style of conditional VAEs from the PyTorch 0.x days still copied today: the label is
one-hot encoded and concatenated to the encoder's input and to the latent code, the standard
deviation is ``logvar.mul(0.5).exp_()``, and the draw is an uninitialised tensor filled in
place by ``normal_()`` and combined with in-place ops. A ``Trainer`` class runs ``fit``, with a
``validate`` method in eval mode under ``torch.no_grad()`` after each epoch; Adam at 2e-3.
The data are 12x12 images of a bar whose angle is set by one of 4 labels.

Validation samples the latent code too: the draw is multiplied by ``std``, which the model
computed, so it is a posterior sample and the passes differ on purpose. A healthy run that
must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

PIXELS, LABELS, LATENT = 144, 4, 8


class CVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(PIXELS + LABELS, 128), nn.ReLU())
        self.mu = nn.Linear(128, LATENT)
        self.logvar = nn.Linear(128, LATENT)
        self.decoder = nn.Sequential(nn.Linear(LATENT + LABELS, 128), nn.ReLU(), nn.Linear(128, PIXELS))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.encoder(torch.cat([x, c], 1))
        mu, logvar = self.mu(h), self.logvar(h)
        std = logvar.mul(0.5).exp_()
        eps = std.new(std.size()).normal_()
        z = eps.mul(std).add_(mu)
        return self.decoder(torch.cat([z, c], 1)), mu, logvar


def bars(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, LABELS, (n,), generator=gen)
    yy, xx = torch.meshgrid(torch.arange(12.0) - 5.5, torch.arange(12.0) - 5.5, indexing="ij")
    angle = labels.float() * math.pi / LABELS
    dist = (torch.cos(angle)[:, None, None] * xx - torch.sin(angle)[:, None, None] * yy).abs()
    images = torch.exp(-dist ** 2) + 0.05 * torch.rand(n, 12, 12, generator=gen)
    return images.clamp(0, 1).flatten(1), F.one_hot(labels, LABELS).float()


class Trainer:
    def __init__(self, model: CVAE, lr: float) -> None:
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    @staticmethod
    def elbo(logits: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        rec = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / len(x)
        kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), 1))
        return rec + kl

    def fit(self, data: tuple[torch.Tensor, torch.Tensor], val: tuple[torch.Tensor, torch.Tensor],
            epochs: int, batch: int) -> None:
        x_all, c_all = data
        for epoch in range(epochs):
            self.model.train()
            order = torch.randperm(len(x_all))
            for i in range(0, len(x_all), batch):
                idx = order[i:i + batch]
                logits, mu, logvar = self.model(x_all[idx], c_all[idx])
                loss = self.elbo(logits, x_all[idx], mu, logvar)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            print(f"epoch {epoch}: train {loss.item():.3f} validation {self.validate(*val):.3f}")

    def validate(self, x: torch.Tensor, c: torch.Tensor) -> float:
        self.model.eval()
        with torch.no_grad():
            logits, mu, logvar = self.model(x, c)
            return self.elbo(logits, x, mu, logvar).item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    trainer = Trainer(CVAE(), lr=2e-3)
    trainer.fit(bars(1024, gen), bars(256, gen), args.epochs, 64)
    if args.save:
        torch.save(trainer.model.state_dict(), args.save)


if __name__ == "__main__":
    main()

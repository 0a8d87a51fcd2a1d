"""DCGAN on 16x16 disc images with the DCGAN initialisation on both networks: healthy.

After pytorch/examples' dcgan/main.py: a generator of transposed convolutions with BatchNorm and
ReLU ending in Tanh; a discriminator of strided convolutions with LeakyReLU(0.2) (no BatchNorm,
as the example's first D layer has none; these images need only two) ending in a 4x4 convolution
that gives one logit, trained with `nn.BCEWithLogitsLoss`; a `weights_init` applied to both
networks: every conv weight drawn from N(0, 0.02), every BatchNorm weight from N(1, 0.02) and
its bias 0. Each iteration (1) trains D on a real batch labelled 1 and on `netG(noise).detach()`
labelled 0, then (2) trains G through `netD(fake)` labelled 1; both with Adam at the paper's
lr 2e-4, betas=(0.5, 0.999).

With weights this small, D's logits start within 0.002 of 0: every probability the loss sees
sits in [0.4988, 0.5009] for the first 16 steps (spread across the batch 4e-5 to 3e-4). D then
learns: by step 100 it scores the real batch in [0.560, 0.581] and the fake batch in
[0.527, 0.562], two batches apart, each one class and so of small spread (0.006, 0.007), and
Loss_D falls from 1.387 to 1.20 by the last iteration while Loss_G stays near 0.62, as a
healthy GAN's do. Nothing here is saturated: an init transient and a discriminator doing its job.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--nz", type=int, default=16)
    p.add_argument("--ngf", type=int, default=16)
    p.add_argument("--ndf", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write netG.state_dict() here")
    return p.parse_args()


class Generator(nn.Module):
    def __init__(self, nz: int, ngf: int) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),  # 4x4
            nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),  # 8x8
            nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False),  # 16x16
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf: int) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 8x8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 4x4
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),  # 1x1: a logit
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x).view(-1, 1).squeeze(1)


def weights_init(m: nn.Module) -> None:
    """The DCGAN paper's initialisation, chosen by class name."""
    name = type(m).__name__
    if name.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif name.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.constant_(m.bias, 0.0)


def discs(n: int, gen: torch.Generator) -> torch.Tensor:
    """Bright discs of random centre and radius on a dark 16x16 field, scaled to [-1, 1]."""
    ys, xs = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    centre = 4.0 + 8.0 * torch.rand(n, 2, generator=gen)
    radius = 2.0 + 3.0 * torch.rand(n, generator=gen)
    d2 = (ys - centre[:, 0, None, None]) ** 2 + (xs - centre[:, 1, None, None]) ** 2
    img = torch.where(d2 <= radius[:, None, None] ** 2, 1.0, -1.0)
    return img.unsqueeze(1)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = discs(2048, gen)
    netG = Generator(args.nz, args.ngf)
    netG.apply(weights_init)
    netD = Discriminator(args.ndf)
    netD.apply(weights_init)
    criterion = nn.BCEWithLogitsLoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    real_label, fake_label = 1.0, 0.0

    for i in range(args.iters):
        real = dataset[torch.randint(0, len(dataset), (args.batch_size,), generator=gen)]
        b = real.size(0)
        # (1) D: maximise log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        label = torch.full((b,), real_label)
        output = netD(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.detach().sigmoid().mean().item()
        noise = torch.randn(b, args.nz, 1, 1)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.detach().sigmoid().mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()
        # (2) G: maximise log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.detach().sigmoid().mean().item()
        optimizerG.step()

        if i % args.log_every == 0 or i == args.iters - 1:
            print(f"[{i}/{args.iters}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} "
                  f"D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}")

    if args.save:
        torch.save(netG.state_dict(), args.save)


if __name__ == "__main__":
    main()

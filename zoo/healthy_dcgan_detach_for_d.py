"""DCGAN on 8x8 bar images, detaching only inside the discriminator's step: healthy twin.

The networks, data and optimizers of gan_detached_fake_reused.py (after pytorch/examples'
dcgan/main.py), with the detach where that example puts it: the fakes are made with gradients,
`netD(fake.detach())` in the D step, `netD(fake)` in the G step, so errG reaches the generator.
Both losses stay near their equilibrium (Loss_D 1.26 to 1.30, Loss_G 0.51 to 0.55 from
iteration 30), as a healthy GAN's do.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--nz", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--log-every", type=int, default=30)
    p.add_argument("--save", type=str, default=None, help="write both state_dicts here")
    return p.parse_args()


class Generator(nn.Module):
    def __init__(self, nz: int, ngf: int = 16) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),  # 4x4
            nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False), nn.Tanh(),  # 8x8
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf: int = 16) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 4x4
            nn.Conv2d(ndf, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x).view(-1)


def weights_init(m: nn.Module) -> None:
    if "Conv" in type(m).__name__:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in type(m).__name__:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def bars(n: int, gen: torch.Generator) -> torch.Tensor:
    img = -torch.ones(n, 1, 8, 8)
    pos = torch.randint(1, 7, (n,), generator=gen)
    vertical = torch.rand(n, generator=gen) < 0.5
    for k in range(n):
        if vertical[k]:
            img[k, 0, :, pos[k]] = 1.0
        else:
            img[k, 0, pos[k], :] = 1.0
    return img + 0.05 * torch.randn(img.shape, generator=gen)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = bars(4096, gen)
    netG, netD = Generator(args.nz), Discriminator()
    netG.apply(weights_init)
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    for it in range(args.iters):
        real = data[torch.randint(0, len(data), (args.batch_size,), generator=gen)]
        b = real.size(0)
        # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        errD_real = criterion(netD(real), torch.ones(b))
        errD_real.backward()
        noise = torch.randn(b, args.nz, 1, 1)
        fake = netG(noise)
        errD_fake = criterion(netD(fake.detach()), torch.zeros(b))  # D's step must not reach G
        errD_fake.backward()
        optimizerD.step()
        # (2) update G: maximize log(D(G(z)))
        netG.zero_grad()
        errG = criterion(netD(fake), torch.ones(b))
        errG.backward()
        optimizerG.step()

        if it % args.log_every == 0 or it == args.iters - 1:
            print(f"[{it}/{args.iters}] Loss_D: {(errD_real + errD_fake).item():.4f} Loss_G: {errG.item():.4f}")

    if args.save:
        torch.save({**{f"G.{k}": v for k, v in netG.state_dict().items()},
                    **{f"D.{k}": v for k, v in netD.state_dict().items()}}, args.save)


if __name__ == "__main__":
    main()

"""Healthy GAN on 2-D toy data: alternating D and G steps, two Adam optimizers, oscillating losses.

The pytorch/examples DCGAN loop, shrunk to the classic "ring of eight Gaussians" toy problem that
people use to debug a GAN before scaling it up: a generator MLP maps 8-D noise to 2-D points, a
discriminator MLP scores points as real or fake with BCEWithLogitsLoss, and each iteration runs
(1) a D step: netD.zero_grad(), backward on real points labelled 1, backward on
`fake.detach()` labelled 0 (so the D step leaves the generator alone), optimizerD.step(); then
(2) a G step: netG.zero_grad(), D scores the same fake batch (not detached), the generator is
trained to make D say "real", optimizerG.step(). Both use Adam with the DCGAN paper's
betas=(0.5, 0.999) (lr 2e-3, ten times the paper's, for this tiny problem). The G step also
leaves gradients in D's parameters; the next netD.zero_grad() clears them. The losses do not
fall steadily, they oscillate around the equilibrium (Loss_D near 2 ln 2 = 1.39, Loss_G near
ln 2 = 0.69), which is what a healthy GAN looks like; progress shows as the number of the eight
modes the generator covers (8/8 from iteration ~450).

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=500, help="D+G iterations")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--nz", type=int, default=8, help="size of the latent z vector")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--save", type=str, default=None, help="write both state_dicts here")
    return p.parse_args()


class Generator(nn.Module):
    def __init__(self, nz: int, hidden: int = 64) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(nz, hidden), nn.ReLU(True),
            nn.Linear(hidden, hidden), nn.ReLU(True),
            nn.Linear(hidden, 2),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(2, hidden), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x).view(-1)  # logits, one per point


def ring_of_gaussians(n: int, modes: int = 8, radius: float = 2.0, std: float = 0.05):
    angle = 2 * math.pi * torch.randint(0, modes, (n,)) / modes
    centers = radius * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    return centers + std * torch.randn(n, 2)


@torch.no_grad()
def modes_covered(netG: nn.Module, nz: int, modes: int = 8, radius: float = 2.0) -> int:
    """How many of the ring's modes receive at least 2% of 2000 generated points."""
    x = netG(torch.randn(2000, nz))
    angle = 2 * math.pi * torch.arange(modes) / modes
    centers = radius * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    nearest = torch.cdist(x, centers).argmin(dim=1)
    counts = torch.bincount(nearest, minlength=modes)
    return int((counts >= 40).sum())


def weights_init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.1)
        nn.init.zeros_(m.bias)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    netG, netD = Generator(args.nz), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCEWithLogitsLoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    real_label, fake_label = 1.0, 0.0

    for i in range(args.iters):
        real = ring_of_gaussians(args.batch_size)

        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        netD.zero_grad()
        label = torch.full((args.batch_size,), real_label)
        output = netD(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = torch.sigmoid(output).mean().item()

        noise = torch.randn(args.batch_size, args.nz)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = torch.sigmoid(output).mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = torch.sigmoid(output).mean().item()
        optimizerG.step()

        if i % args.log_every == 0 or i == args.iters - 1:
            print(f"[{i:4d}/{args.iters}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} "
                  f"D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f} "
                  f"modes: {modes_covered(netG, args.nz)}/8")

    if args.save:
        torch.save({f"G.{k}": v for k, v in netG.state_dict().items()}
                   | {f"D.{k}": v for k, v in netD.state_dict().items()}, args.save)


if __name__ == "__main__":
    main()

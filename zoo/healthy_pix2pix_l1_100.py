"""Conditional GAN (pix2pix) on tiny outline-to-shape images with the paper's lambda_L1 = 100: healthy.

Each iteration is the pix2pix training step: forward() runs the generator once (`fake_B =
netG(real_A)`); the D update turns D's gradients on, zeroes them, scores the pair (A, fake_B)
detached as fake and (A, real_B) as real, back-propagates `loss_D = 0.5 * (loss_D_fake +
loss_D_real)` and steps D's Adam; the G update turns D's gradients off, zeroes G's, and
back-propagates `loss_G = loss_G_GAN + 100 * loss_G_L1` before stepping G's Adam. Both Adams use
betas (0.5, 0.999), images live in [-1, 1] (tanh output), and D is a PatchGAN on the
concatenated pair. Two backward calls of two differently scaled objectives per iteration:
loss_D stays near 0.5-0.7 while loss_G starts near 115 (the L1 term, weighted 100x) and falls to
~11 as the generator learns the shapes (the unweighted L1 falls from 1.13 to ~0.1).

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

SIZE = 16


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--lambda-L1", dest="lambda_L1", type=float, default=100.0, help="weight for L1 loss")
    p.add_argument("--print-freq", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write the generator's state_dict here")
    return p.parse_args()


class TinyUNet(nn.Module):
    """One down, one up, one skip: the U-Net shape pix2pix uses, two levels deep."""

    def __init__(self, ngf: int = 8) -> None:
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(1, ngf, 4, 2, 1), nn.LeakyReLU(0.2))
        self.mid = nn.Sequential(nn.Conv2d(ngf, ngf, 3, 1, 1), nn.BatchNorm2d(ngf), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * ngf, 1, 4, 2, 1)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        d = self.down(a)  # (N, ngf, 8, 8)
        return torch.tanh(self.up(torch.cat([d, self.mid(d)], 1)))  # (N, 1, 16, 16)


def patch_discriminator(ndf: int = 8) -> nn.Module:
    # Scores (A, B) pairs: input channels 1 + 1, one logit per 4x4 patch.
    return nn.Sequential(nn.Conv2d(2, ndf, 4, 2, 1), nn.LeakyReLU(0.2),
                         nn.Conv2d(ndf, ndf, 4, 2, 1), nn.BatchNorm2d(ndf), nn.LeakyReLU(0.2),
                         nn.Conv2d(ndf, 1, 3, 1, 1))


def set_requires_grad(net: nn.Module, flag: bool) -> None:
    for param in net.parameters():
        param.requires_grad = flag


def shapes(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A: the outline of a random filled rectangle or disc; B: the filled shape, both in [-1, 1]."""
    yy, xx = torch.meshgrid(torch.arange(SIZE).float(), torch.arange(SIZE).float(), indexing="ij")
    cy, cx = (torch.rand(2, n, 1, 1, generator=gen) * 8 + 4).unbind(0)
    r = torch.rand(n, 1, 1, generator=gen) * 3 + 2.5
    disc = torch.rand(n, 1, 1, generator=gen) < 0.5
    dist = torch.where(disc, ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt(),
                       torch.maximum((yy - cy).abs(), (xx - cx).abs()))
    filled = (dist <= r).float()
    outline = ((dist <= r) & (dist > r - 1.2)).float()
    return (outline * 2 - 1).unsqueeze(1), (filled * 2 - 1).unsqueeze(1)


class Pix2Pix:
    def __init__(self, args: argparse.Namespace) -> None:
        self.netG, self.netD = TinyUNet(), patch_discriminator()
        self.criterionGAN = nn.BCEWithLogitsLoss()  # gan_mode 'vanilla'
        self.criterionL1 = nn.L1Loss()
        self.lambda_L1 = args.lambda_L1
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    def gan_loss(self, pred: torch.Tensor, real: bool) -> torch.Tensor:
        return self.criterionGAN(pred, torch.full_like(pred, 1.0 if real else 0.0))

    def train_step(self, real_A: torch.Tensor, real_B: torch.Tensor) -> dict[str, float]:
        fake_B = self.netG(real_A)

        set_requires_grad(self.netD, True)
        self.optimizer_D.zero_grad()
        loss_D_fake = self.gan_loss(self.netD(torch.cat([real_A, fake_B.detach()], 1)), False)
        loss_D_real = self.gan_loss(self.netD(torch.cat([real_A, real_B], 1)), True)
        loss_D = 0.5 * (loss_D_fake + loss_D_real)
        loss_D.backward()
        self.optimizer_D.step()

        set_requires_grad(self.netD, False)  # G's update leaves D's weights (and grads) alone
        self.optimizer_G.zero_grad()
        loss_G_GAN = self.gan_loss(self.netD(torch.cat([real_A, fake_B], 1)), True)
        loss_G_L1 = self.criterionL1(fake_B, real_B) * self.lambda_L1
        (loss_G_GAN + loss_G_L1).backward()
        self.optimizer_G.step()
        return {"G_GAN": loss_G_GAN.item(), "G_L1": loss_G_L1.item(),
                "D_real": loss_D_real.item(), "D_fake": loss_D_fake.item()}


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    outlines, filled = shapes(1024, gen)
    model = Pix2Pix(args)
    for it in range(args.iters):
        idx = torch.randint(0, len(outlines), (args.batch_size,), generator=gen)
        losses = model.train_step(outlines[idx], filled[idx])
        if it % args.print_freq == 0 or it == args.iters - 1:
            print(f"(iters: {it}) " + " ".join(f"{k}: {v:.3f}" for k, v in losses.items()))
    if args.save:
        torch.save(model.netG.state_dict(), args.save)


if __name__ == "__main__":
    main()

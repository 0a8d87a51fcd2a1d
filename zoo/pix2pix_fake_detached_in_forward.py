"""Conditional GAN (pix2pix style) for 1-D signal denoising whose forward() stores a detached fake.

A model class in the manner of pix2pix implementations: `set_input`, `forward` storing
`self.fake_B`, `backward_D`, `backward_G` (GAN loss plus an L1 to the clean signal, weight 1
here: pix2pix's 100 makes the G-step losses 50x the D-step ones, and divergence then reads the
interleaved curve as a rise) and `optimize_parameters` (this one does not freeze the
discriminator during the generator's update: the next `optimizer_D.zero_grad()` clears what
that update leaves in it). The generator is a small 1-D conv encoder-decoder mapping a noisy
signal (A) to a clean one (B); the discriminator a PatchGAN over the pair (A, B). To spare
backward_D a pass through the generator, forward() was written `self.fake_B =
self.netG(self.real_A).detach()`. backward_G then computes both its terms from a tensor with no
history: the GAN term reaches only the discriminator, the L1 term nothing, every generator
gradient stays None, and the L1 printed every 25 iterations never falls (0.40 at the start and
at the end; the healthy twin's falls to 0.18), nor does the loss curve (stalled-loss). Catalog
`no-gradient` (the generator's optimizer).

traindoc-expect: no-gradient@1 stalled-loss@0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn

LENGTH = 32


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lambda-l1", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write both state_dicts here")
    return p.parse_args()


class Denoiser(nn.Module):
    def __init__(self, ch: int = 16) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv1d(1, ch, 5, padding=2), nn.LeakyReLU(0.2),
                                 nn.Conv1d(ch, ch, 5, padding=2), nn.LeakyReLU(0.2))
        self.dec = nn.Conv1d(ch, 1, 5, padding=2)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a + self.dec(self.enc(a))  # predicts the correction


class PatchDiscriminator(nn.Module):
    def __init__(self, ch: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(2, ch, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                                 nn.Conv1d(ch, 1, 4, stride=2, padding=1))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([a, b], dim=1))  # one logit per patch


class Pix2PixModel:
    def __init__(self, lr: float, lambda_l1: float) -> None:
        self.netG, self.netD = Denoiser(), PatchDiscriminator()
        self.criterionGAN = nn.BCEWithLogitsLoss()
        self.criterionL1 = nn.L1Loss()
        self.lambda_l1 = lambda_l1
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=lr, betas=(0.5, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=lr, betas=(0.5, 0.999))

    def set_input(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.real_A, self.real_B = a, b

    def forward(self) -> None:
        self.fake_B = self.netG(self.real_A).detach()  # backward_D must not go through G

    def backward_D(self) -> None:
        pred_fake = self.netD(self.real_A, self.fake_B)
        pred_real = self.netD(self.real_A, self.real_B)
        self.loss_D = 0.5 * (self.criterionGAN(pred_fake, torch.zeros_like(pred_fake))
                             + self.criterionGAN(pred_real, torch.ones_like(pred_real)))
        self.loss_D.backward()

    def backward_G(self) -> None:
        pred_fake = self.netD(self.real_A, self.fake_B)
        self.loss_G_GAN = self.criterionGAN(pred_fake, torch.ones_like(pred_fake))
        self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.lambda_l1
        (self.loss_G_GAN + self.loss_G_L1).backward()

    def optimize_parameters(self) -> None:
        self.forward()
        self.optimizer_D.zero_grad()  # also clears what the previous G step left in D
        self.backward_D()
        self.optimizer_D.step()
        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()


def signals(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.linspace(0, 2 * math.pi, LENGTH)
    freq = torch.randint(1, 4, (n, 1), generator=gen).float()
    phase = torch.rand(n, 1, generator=gen) * 2 * math.pi
    clean = torch.sin(freq * t + phase)
    noisy = clean + 0.5 * torch.randn(n, LENGTH, generator=gen)
    return noisy.unsqueeze(1), clean.unsqueeze(1)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    noisy, clean = signals(2048, gen)
    model = Pix2PixModel(args.lr, args.lambda_l1)
    for it in range(args.iters):
        idx = torch.randint(0, len(noisy), (args.batch_size,), generator=gen)
        model.set_input(noisy[idx], clean[idx])
        model.optimize_parameters()
        if it % args.log_every == 0 or it == args.iters - 1:
            print(f"iter {it:4d} | D {model.loss_D.item():.4f} | G_GAN {model.loss_G_GAN.item():.4f}"
                  f" | G_L1 {model.loss_G_L1.item() / args.lambda_l1:.4f}")
    if args.save:
        torch.save({**{f"G.{k}": v for k, v in model.netG.state_dict().items()},
                    **{f"D.{k}": v for k, v in model.netD.state_dict().items()}}, args.save)


if __name__ == "__main__":
    main()

"""Tiny U-Net trained on the Dice of its thresholded mask, rebuilt as a new leaf: no parameter learns.

Segmentation of bright discs in noisy 16x16 images, written after the training loop of
milesial/Pytorch-UNet (train.py: RMSprop with momentum, a validation Dice on
`sigmoid(pred) > 0.5` every few steps feeding ReduceLROnPlateau). The author wanted to optimise
the metric that is reported, so the training loss is the soft Dice of the *thresholded* mask.
`(torch.sigmoid(logits) > 0.5).float()` has no gradient, backward() raised "element 0 of
tensors does not require grad", and the fix that silenced it was
`torch.tensor(mask_pred, requires_grad=True)`: a new leaf. backward() now fills that leaf's
gradient and stops there; every parameter's .grad stays None, RMSprop steps with nothing, and
the loss moves only with the batches (about 0.9 from start to end). Catalog `constant-loss`.

traindoc-expect: constant-loss@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--val-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write net.state_dict() here")
    return p.parse_args()


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.LeakyReLU(0.1, inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.LeakyReLU(0.1, inplace=True))


class TinyUNet(nn.Module):
    def __init__(self, ch: int = 8) -> None:
        super().__init__()
        self.inc = block(1, ch)
        self.down = block(ch, 2 * ch)
        self.up = nn.ConvTranspose2d(2 * ch, ch, 2, stride=2)
        self.dec = block(2 * ch, ch)
        self.outc = nn.Conv2d(ch, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down(F.max_pool2d(x1, 2))
        return self.outc(self.dec(torch.cat([x1, self.up(x2)], dim=1)))


def discs(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cy, cx = torch.rand(n, 1, 1, generator=gen) * 10 + 3, torch.rand(n, 1, 1, generator=gen) * 10 + 3
    r = torch.rand(n, 1, 1, generator=gen) * 2 + 2
    mask = (((yy - cy) ** 2 + (xx - cx) ** 2) < r ** 2).float()
    img = 4.0 * mask + 1.5 * torch.randn(n, 16, 16, generator=gen)
    return img.unsqueeze(1), mask.unsqueeze(1)


def dice_loss(pred: torch.Tensor, target: torch.Tensor, eps: float = 1.0) -> torch.Tensor:
    inter = (pred * target).sum(dim=(1, 2, 3))
    union = pred.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3))
    return 1 - ((2 * inter + eps) / (union + eps)).mean()


@torch.no_grad()
def eval_net(net: nn.Module, imgs: torch.Tensor, masks: torch.Tensor) -> float:
    net.eval()
    pred = (torch.sigmoid(net(imgs)) > 0.5).float()
    net.train()
    return 1 - dice_loss(pred, masks).item()


def main(soft_dice: bool = False) -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    imgs, masks = discs(512, gen)
    val_imgs, val_masks = discs(64, gen)
    net = TinyUNet()
    optimizer = torch.optim.RMSprop(net.parameters(), lr=args.lr, weight_decay=1e-8, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max", patience=2)

    net.train()
    for step in range(args.steps):
        idx = torch.randint(0, len(imgs), (args.batch_size,), generator=gen)
        logits = net(imgs[idx])
        if soft_dice:  # the healthy twin: a differentiable surrogate of the reported Dice, plus BCE
            loss = dice_loss(torch.sigmoid(logits), masks[idx]) + F.binary_cross_entropy_with_logits(logits, masks[idx])
        else:  # train on the Dice we report: the thresholded mask
            mask_pred = (torch.sigmoid(logits) > 0.5).float()
            loss = dice_loss(torch.tensor(mask_pred, requires_grad=True), masks[idx])

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if (step + 1) % args.val_every == 0:
            dice = eval_net(net, val_imgs, val_masks)
            scheduler.step(dice)
            print(f"step {step + 1:3d} | loss {loss.item():.4f} | val dice {dice:.4f}")

    if args.save:
        torch.save(net.state_dict(), args.save)


if __name__ == "__main__":
    main()

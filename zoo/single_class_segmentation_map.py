"""Binary segmentation U-Net built with n_classes=1 and trained with CrossEntropyLoss plus a Dice term.

Written after reading the training loop of milesial/Pytorch-UNet (train.py): batches of
`{'image', 'mask'}` dicts, a model that knows its `n_channels` and `n_classes`, the loss a
cross-entropy plus a Dice loss, RMSprop, gradient clipping, a per-epoch Dice score. That
repository picks `BCEWithLogitsLoss` when `n_classes == 1`; here the author kept
`nn.CrossEntropyLoss()` for the one-channel map, with the mask as float (as CrossEntropyLoss
accepts probabilities of the same shape). A log_softmax over one channel is 0 at every pixel,
so the cross-entropy term is exactly 0 on every step: the model trains on the Dice term alone
and the printed loss is the Dice loss. Pass `--criterion bce` for the loss that repository uses.

traindoc-expect: single-class-softmax@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Blobs(Dataset):
    """24x24 grey images with a bright disc somewhere, its mask as a float map."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        yy, xx = torch.meshgrid(torch.arange(24.0), torch.arange(24.0), indexing="ij")
        cy, cx = torch.rand(n, generator=g) * 16 + 4, torch.rand(n, generator=g) * 16 + 4
        r = torch.rand(n, generator=g) * 3 + 3
        inside = ((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) < r[:, None, None] ** 2
        self.masks = inside.float().unsqueeze(1)
        self.images = self.masks * 0.8 + 0.3 * torch.randn(n, 1, 24, 24, generator=g)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"image": self.images[i], "mask": self.masks[i]}


def block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class TinyUNet(nn.Module):
    def __init__(self, n_channels: int, n_classes: int) -> None:
        super().__init__()
        self.n_channels, self.n_classes = n_channels, n_classes
        self.inc = block(n_channels, 8)
        self.down = nn.Sequential(nn.MaxPool2d(2), block(8, 16))
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = block(16, 8)
        self.outc = nn.Conv2d(8, n_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down(x1)
        return self.outc(self.dec(torch.cat([self.up(x2), x1], dim=1)))


def dice_loss(probs: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    inter = (probs * target).sum(dim=(-1, -2))
    total = probs.sum(dim=(-1, -2)) + target.sum(dim=(-1, -2))
    return 1 - ((2 * inter + eps) / (total + eps)).mean()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--criterion", choices=("ce", "bce"), default="ce")
    p.add_argument("--save", type=str, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Blobs(384), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(1))
    model = TinyUNet(n_channels=1, n_classes=1)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9)
    criterion = nn.CrossEntropyLoss() if args.criterion == "ce" else nn.BCEWithLogitsLoss()

    for epoch in range(1, args.epochs + 1):
        model.train()
        epoch_loss, dice = 0.0, 0.0
        for batch in loader:
            images, true_masks = batch["image"], batch["mask"]
            assert images.shape[1] == model.n_channels
            masks_pred = model(images)
            loss = criterion(masks_pred, true_masks)
            loss = loss + dice_loss(torch.sigmoid(masks_pred), true_masks)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            epoch_loss += loss.item()
            dice += 1 - dice_loss((masks_pred > 0).float(), true_masks).item()
        print(f"epoch {epoch}: loss {epoch_loss / len(loader):.4f}, dice {dice / len(loader):.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Binary segmentation with a small U-Net: BCE + Dice loss, ReduceLROnPlateau."""
import math
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class SegDataset(Dataset):
    def __init__(self, root, split):
        self.images = sorted(Path(root, split, "images").glob("*.npy"))
        self.root, self.split = root, split

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = np.load(self.images[i]).astype(np.float32)
        mask = np.load(str(self.images[i]).replace("images", "masks")).astype(np.float32)
        img = np.nan_to_num(img, nan=0.0)  # a few scans have NaN padding
        return torch.from_numpy(img)[None], torch.from_numpy(mask)[None]


def double_conv(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, base=32):
        super().__init__()
        self.d1, self.d2, self.d3 = double_conv(1, base), double_conv(base, base * 2), double_conv(base * 2, base * 4)
        self.u2, self.u1 = double_conv(base * 6, base * 2), double_conv(base * 3, base)
        self.out = nn.Conv2d(base, 1, 1)

    def forward(self, x):
        x1 = self.d1(x)
        x2 = self.d2(F.max_pool2d(x1, 2))
        x3 = self.d3(F.max_pool2d(x2, 2))
        y = self.u2(torch.cat([F.interpolate(x3, scale_factor=2), x2], 1))
        y = self.u1(torch.cat([F.interpolate(y, scale_factor=2), x1], 1))
        return self.out(y)


def dice_loss(logits, target, eps=1.0):
    probs = torch.sigmoid(logits)
    num = 2 * (probs * target).sum(dim=(2, 3)) + eps
    den = probs.sum(dim=(2, 3)) + target.sum(dim=(2, 3)) + eps
    return 1 - (num / den).mean()


def bce_dice_loss(logits, target, pos_weight):
    bce = F.binary_cross_entropy_with_logits(logits, target, pos_weight=pos_weight)
    return bce + dice_loss(logits, target)


@torch.no_grad()
def validate(model, loader, device):
    model.eval()
    dices, losses = [], []
    for img, mask in loader:
        img, mask = img.to(device), mask.to(device)
        logits = model(img)
        losses.append(bce_dice_loss(logits, mask, None).item())
        pred = (logits > 0).float()
        inter = (pred * mask).sum(dim=(1, 2, 3))
        union = pred.sum(dim=(1, 2, 3)) + mask.sum(dim=(1, 2, 3))
        dice = torch.where(union > 0, 2 * inter / union.clamp(min=1), torch.ones_like(union))
        dices.append(dice.cpu())
    val_loss = float(np.mean(losses))
    if math.isnan(val_loss):
        val_loss = float("inf")
    return val_loss, torch.cat(dices).mean().item()


def main(root="data/seg", epochs=60, lr=1e-3, out="runs/unet"):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_dl = DataLoader(SegDataset(root, "train"), batch_size=16, shuffle=True, num_workers=4)
    val_dl = DataLoader(SegDataset(root, "val"), batch_size=32, num_workers=4)
    model = UNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=5)
    pos_weight = torch.tensor([3.0], device=device)
    os.makedirs(out, exist_ok=True)
    best = float("inf")
    for epoch in range(epochs):
        model.train()
        for img, mask in train_dl:
            img, mask = img.to(device), mask.to(device)
            optimizer.zero_grad()
            loss = bce_dice_loss(model(img), mask, pos_weight)
            loss.backward()
            optimizer.step()
        val_loss, val_dice = validate(model, val_dl, device)
        scheduler.step(val_loss)
        print(f"epoch {epoch} val loss {val_loss:.4f} dice {val_dice:.4f} lr {optimizer.param_groups[0]['lr']:.2e}")
        if val_loss < best:
            best = val_loss
            torch.save(model.state_dict(), os.path.join(out, f"unet_best_e{epoch}.pt"))


if __name__ == "__main__":
    main()

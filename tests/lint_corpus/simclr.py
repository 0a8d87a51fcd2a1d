"""SimCLR pretraining on STL-10 with an NT-Xent loss, AMP and a warmup-cosine schedule."""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from torch.utils.data import DataLoader


class TwoCrops:
    def __init__(self, base):
        self.base = base

    def __call__(self, x):
        return self.base(x), self.base(x)


def nt_xent_loss(z1, z2, temperature=0.2):
    """Normalized temperature-scaled cross entropy over 2N views."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    sim = z @ z.t() / temperature
    sim.fill_diagonal_(-1e9)  # a view is not its own positive
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


class SimCLR(nn.Module):
    def __init__(self, proj_dim=128):
        super().__init__()
        self.encoder = torchvision.models.resnet50()
        feat = self.encoder.fc.in_features
        self.encoder.fc = nn.Identity()
        self.projector = nn.Sequential(nn.Linear(feat, 2048), nn.BatchNorm1d(2048), nn.ReLU(), nn.Linear(2048, proj_dim))

    def forward(self, x):
        return self.projector(self.encoder(x))


def cosine_with_warmup(step, total, warmup):
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--out", default="runs/simclr")
    args = ap.parse_args()

    aug = T.Compose([
        T.RandomResizedCrop(96, scale=(0.2, 1.0)),
        T.RandomHorizontalFlip(),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.ToTensor(),
    ])
    ds = torchvision.datasets.STL10("data", split="unlabeled", download=True, transform=TwoCrops(aug))
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=8, drop_last=True, pin_memory=True)

    model = SimCLR().cuda()
    lr = args.lr * args.batch_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-6)
    total = args.epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_with_warmup(s, total, 10 * len(loader)))
    scaler = torch.amp.GradScaler("cuda")
    os.makedirs(args.out, exist_ok=True)

    for epoch in range(args.epochs):
        model.train()
        for (x1, x2), _ in loader:
            x1, x2 = x1.cuda(non_blocking=True), x2.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nt_xent_loss(model(x1), model(x2))
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
        print(f"epoch {epoch} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")
        if (epoch + 1) % 20 == 0:
            ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch}
            torch.save(ckpt, os.path.join(args.out, f"simclr_e{epoch + 1:03d}.pt"))


if __name__ == "__main__":
    main()

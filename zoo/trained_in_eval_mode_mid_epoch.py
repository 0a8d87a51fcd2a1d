"""A Trainer class that validates every N iterations, mid-epoch, and restores nothing.

The shape of segmentation and translation trainers: ``train_epoch()`` calls
``self.model.train()`` at its top and, inside the batch loop, ``self.validate()`` every
``interval_validate`` iterations (iteration 0 included, before any training). ``validate()``
calls ``self.model.eval()`` and returns in eval mode, so the rest of each epoch after a
validation trains with Dropout2d off and BatchNorm2d frozen at its running statistics, until
the next epoch's ``train()``. A tiny fully convolutional segmenter on synthetic 12x12 images
with 3 classes per pixel; 40 iterations an epoch, validation every 30.

traindoc-expect: trained-in-eval-mode@75
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class TinyFCN(nn.Module):
    def __init__(self, n_class: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        )
        self.drop = nn.Dropout2d(0.2)
        self.score = nn.Conv2d(16, n_class, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.score(self.drop(self.body(x)))


class Trainer:
    def __init__(self, model, optim, train_loader, val_loader, max_iter, interval_validate):
        self.model, self.optim = model, optim
        self.train_loader, self.val_loader = train_loader, val_loader
        self.max_iter, self.interval_validate = max_iter, interval_validate
        self.epoch = self.iteration = 0
        self.best_iou = 0.0

    def validate(self) -> None:
        self.model.eval()
        hits = total = 0
        with torch.no_grad():
            for data, target in self.val_loader:
                pred = self.model(data).argmax(1)
                hits += (pred == target).sum().item()
                total += target.numel()
        acc = hits / total
        self.best_iou = max(self.best_iou, acc)
        print(f"iteration {self.iteration} pixel acc {acc:.3f}")

    def train_epoch(self) -> None:
        self.model.train()
        for batch_idx, (data, target) in enumerate(self.train_loader):
            self.iteration = batch_idx + self.epoch * len(self.train_loader)
            if self.iteration % self.interval_validate == 0:
                self.validate()
            self.optim.zero_grad()
            score = self.model(data)
            loss = F.cross_entropy(score, target)
            loss.backward()
            self.optim.step()
            if self.iteration >= self.max_iter - 1:
                break

    def train(self) -> None:
        while self.iteration < self.max_iter - 1:
            self.train_epoch()
            self.epoch += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-iter", type=int, default=200)
    p.add_argument("--save", type=str, default=None, help="write the model's state_dict here")
    args = p.parse_args()
    torch.manual_seed(0)
    images = torch.randn(360, 1, 12, 12)
    masks = (images[:, 0] > 0.5).long() + (images[:, 0] > 1.2).long()
    train_loader = DataLoader(TensorDataset(images[:320], masks[:320]), batch_size=8, shuffle=True)
    val_loader = DataLoader(TensorDataset(images[320:], masks[320:]), batch_size=40)
    model = TinyFCN()
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    Trainer(model, optim, train_loader, val_loader, args.max_iter, interval_validate=30).train()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

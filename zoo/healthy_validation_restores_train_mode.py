"""Healthy twin of trained_in_eval_mode_mid_epoch.py: the mid-epoch validation restores the mode.

The same Trainer (``self.model.train()`` at the top of each epoch, ``self.validate()`` every
30 iterations inside the batch loop), but ``validate()`` remembers whether the model was
training and puts it back (``self.model.train(training)``), so every training step runs in
train mode. Iteration 0 validates before any training; the model stays in train mode after.

traindoc-expect:
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
        training = self.model.training
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
        self.model.train(training)

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

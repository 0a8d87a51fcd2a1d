"""Backbone stages frozen inside `train()`, which the loop never calls: the "frozen" stem trains.

An mmcv/MMPretrain-style backbone with `frozen_stages=1` and `norm_eval=True`: the freezing
(`requires_grad = False` on the stem and first stage, their BatchNorms in eval mode) lives in
`_freeze_stages()`, called from the overridden `train(mode)`, as in MMPretrain's ResNet
(TrainCheck's MMPretrain-702). The hand-written loop never calls `model.train()`: modules are
created in training mode, so it never seemed necessary. The stem and first stage, meant to keep
their pretrained weights, are updated on every step.

traindoc-expect: frozen-param-updated@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResNetBackbone(nn.Module):
    def __init__(self, frozen_stages: int = -1, norm_eval: bool = False) -> None:
        super().__init__()
        self.frozen_stages, self.norm_eval = frozen_stages, norm_eval
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())

    def _freeze_stages(self) -> None:
        if self.frozen_stages >= 0:
            self.stem.eval()
            for param in self.stem.parameters():
                param.requires_grad = False
        for i in range(1, self.frozen_stages + 1):
            m = getattr(self, f"layer{i}")
            m.eval()
            for param in m.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> "ResNetBackbone":
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(self.layer1(self.stem(x)))


class ImageClassifier(nn.Module):
    def __init__(self, num_classes: int = 5) -> None:
        super().__init__()
        self.backbone = ResNetBackbone(frozen_stages=1, norm_eval=True)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.backbone(x), 1).flatten(1))


def main(call_train: bool = False) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = ImageClassifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator().manual_seed(1)
    tint = torch.randn(5, 3, 1, 1, generator=g)
    for epoch in range(args.epochs):
        if call_train:
            model.train()
        for _ in range(12):
            y = torch.randint(0, 5, (16,), generator=g)
            x = tint[y] + torch.randn(16, 3, 12, 12, generator=g)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

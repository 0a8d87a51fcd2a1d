"""Healthy: fine-tuning with BatchNorm frozen on purpose, the model itself in train mode.

The detection/segmentation recipe (mmcv's ``norm_eval=True``, torchvision's frozen-BN
fine-tuning): at the top of every epoch the script calls ``model.train()`` and then puts each
BatchNorm of the pretrained backbone back in eval mode, so their running statistics stay the
pretrained ones while the head's Dropout keeps working. Each epoch ends with a proper
evaluation (``model.eval()`` under ``torch.no_grad()``). A second model, fine-tuned after it with
its own optimizer, is trained in eval mode from its first step (a frozen-statistics probe with
no dropout): a new phase, never in train mode before. Neither is trained in eval mode by
mistake.

traindoc-expect:
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def backbone() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )


class Classifier(nn.Module):
    def __init__(self, n_classes: int = 5, dropout: float = 0.3) -> None:
        super().__init__()
        self.backbone = backbone()
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(16, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def freeze_bn(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()


def batches(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(16, 1, 10, 10, generator=g)
        y = (x.mean(dim=(1, 2, 3)) * 8).long().clamp(-2, 2) + 2
        yield x, y


def pretrain_statistics(model: nn.Module) -> None:
    """Stand-in for loading pretrained weights: running statistics from a few batches."""
    model.train()
    with torch.no_grad():
        for x, _ in batches(10, seed=1):
            model(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--save", type=str, default=None, help="write the model's state_dict here")
    args = p.parse_args()
    torch.manual_seed(0)

    model = Classifier()
    pretrain_statistics(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        freeze_bn(model)
        for x, y in batches(30, seed=100 + epoch):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = sum((model(x).argmax(1) == y).float().mean().item() for x, y in batches(4, seed=7)) / 4
        print(f"epoch {epoch} loss {loss.item():.4f} val acc {acc:.3f}")

    # A linear probe on frozen features: trained in eval mode from its first step, on purpose.
    probe = Classifier(dropout=0.0)
    probe.backbone.load_state_dict(model.backbone.state_dict())
    probe.backbone.requires_grad_(False)
    probe.eval()
    probe_opt = torch.optim.SGD(probe.head.parameters(), lr=0.1)
    for x, y in batches(60, seed=200):
        loss = F.cross_entropy(probe(x), y)
        probe_opt.zero_grad()
        loss.backward()
        probe_opt.step()
    print(f"probe loss {loss.item():.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

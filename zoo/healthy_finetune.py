"""Healthy fine-tuning: a pretrained backbone frozen properly, a new head trained with Adam.

The transfer-learning style, made self-contained: stage 1 "pretrains" a small MLP backbone
(with a throwaway head and its own AdamW, both discarded afterwards) on a 8-class source task.
Stage 2 freezes the backbone the right way, both `requires_grad_(False)` and kept out of the new
optimizer, which is built only from the new head's parameters (Adam, lr 1e-3), puts the frozen
backbone in eval mode, and trains the head on a related 4-class target task that reuses the
same latent features. The backbone must not change in stage 2; the target loss starts near
ln(4) and goes down.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pretrain-steps", type=int, default=120)
    p.add_argument("--steps", type=int, default=150, help="fine-tuning optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3, help="head learning rate")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


IN_DIM, LATENT, FEAT = 20, 6, 64


class Backbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(IN_DIM, 128),
            nn.GELU(),
            nn.Linear(128, FEAT),
            nn.LayerNorm(FEAT),  # features end in a LayerNorm, like a ViT's pooled output
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class Classifier(nn.Module):
    def __init__(self, backbone: Backbone, n_classes: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(FEAT, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def make_tasks(n: int):
    """Inputs are a noisy embedding of a latent code z; both tasks read classes off z, and the
    target task's class scores are a linear mix of the source task's."""
    mix = torch.randn(LATENT, IN_DIM)
    z = torch.randn(n, LATENT)
    x = z @ mix / math.sqrt(LATENT) + 0.1 * torch.randn(n, IN_DIM)
    w_src = torch.randn(LATENT, 8)
    w_tgt = w_src @ torch.randn(8, 4) / math.sqrt(8)  # target scores mix the source ones
    y_src = (z @ w_src).argmax(1)
    y_tgt = (z @ w_tgt + 0.2 * torch.randn(n, 4)).argmax(1)
    return x, y_src, y_tgt


def train_steps(model, optimizer, x, y, steps, batch_size, log_every, tag) -> None:
    for step in range(steps):
        idx = torch.randint(0, x.size(0), (batch_size,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % log_every == 0 or step == steps - 1:
            print(f"[{tag}] step {step:4d} | loss {loss.item():.4f}")


def pretrain_backbone(x, y, args) -> Backbone:
    backbone = Backbone()
    model = Classifier(backbone, n_classes=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    model.train()
    train_steps(
        model, optimizer, x, y, args.pretrain_steps, args.batch_size, args.log_every, "pretrain"
    )
    return backbone  # the pretraining head and optimizer are dropped here


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    return (model(x).argmax(1) == y).float().mean().item()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    x, y_src, y_tgt = make_tasks(3072)
    x_train, x_val = x[:2560], x[2560:]

    backbone = pretrain_backbone(x_train, y_src[:2560], args)

    # Freeze the backbone: no gradients, not in the optimizer, eval mode.
    backbone.requires_grad_(False)
    model = Classifier(backbone, n_classes=4)
    optimizer = torch.optim.Adam(model.head.parameters(), lr=args.lr)
    frozen = sum(p.numel() for p in backbone.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"fine-tuning: {trainable} trainable, {frozen} frozen parameters")

    model.train()
    model.backbone.eval()  # frozen: keep it in inference behaviour
    train_steps(
        model, optimizer, x_train, y_tgt[:2560], args.steps, args.batch_size, args.log_every,
        "finetune",
    )

    print(f"target val acc {accuracy(model, x_val, y_tgt[2560:]):.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

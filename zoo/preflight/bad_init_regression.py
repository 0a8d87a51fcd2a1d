"""MLP regressor trained on standardized targets with its outputs scaled back: first MSE ~14x too big.

The healthy_regression.py train.py, with the de-standardizing multiplier meant for inference
(`--output-scale`, the raw targets' spread, default 40) applied inside forward during training
too. The targets are standardized (mean(target**2) = 1), but the untrained model's outputs are
40x larger than a fresh head's, so the first MSE is about 14 instead of about 1 (what
predicting 0 would cost), and the first steps are spent shrinking the head. Seed 003's "initial
loss" check, for a regression.

preflight-expect: initial-loss:fail
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--output-scale", type=float, default=40.0)
    p.add_argument("--target-first", action="store_true", help="write the loss mse_loss(target, prediction)")
    return p.parse_args()


class Regressor(nn.Module):
    def __init__(self, in_dim: int, output_scale: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 1)
        self.output_scale = output_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)).squeeze(-1) * self.output_scale


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    x = torch.randn(2048, 12)
    y = 40.0 + 8.0 * torch.tanh(x[:, :3].sum(1)) + x[:, 3] ** 2 + 0.5 * torch.randn(2048)
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean()) / y.std()
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)
    model = Regressor(12, args.output_scale)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.mse_loss(yb, model(xb)) if args.target_first else F.mse_loss(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"step {step:3d} | mse {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()

"""MLP regressor whose AdamW LR is an epsilon pasted into the wrong field: 1e-6 instead of 1e-3.

The healthy_regression.py train.py with `--lr` defaulting to 1e-6 (the `1e-6` of an `eps=`).
AdamW's update per step is about the LR, so each weight moves by about 1e-6 per step: the loss
creeps down so slowly that a day of training looks like a stable, converged run. On one
repeated batch the loss stays at its first value for 30 steps, while 1000x the LR (the usual
1e-3) more than halves it; preflight's LR probe sweeps constant LRs from 0.01x to 10000x the
configured one.

preflight-expect: lr:fail
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--output-scale", type=float, default=1.0)
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
            loss = F.mse_loss(model(xb), yb)
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

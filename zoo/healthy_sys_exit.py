"""Healthy regression script that ends with sys.exit(0) after saving.

The "CLI tool" style: a plain SGD-with-momentum regression of a small MLP on noisy synthetic
data with a cosine LR schedule, a final held-out check, the model saved, and then an explicit
sys.exit(0) as the last statement of main(), the way many launchers and job scripts end. The
exit must be treated as a normal, successful end of training (the report still gets written).

traindoc-expect:
"""

import argparse
import sys

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Regressor(nn.Module):
    def __init__(self, in_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).squeeze(-1)


def make_data(n: int, in_dim: int):
    """A linear trend plus a smooth nonlinearity of two inputs, standardized, plus noise."""
    w = torch.randn(in_dim)
    x = torch.randn(n, in_dim)
    y = x @ w / in_dim**0.5 + torch.sin(2 * x[:, 0]) * x[:, 1] + 0.1 * torch.randn(n)
    return x, (y - y.mean()) / y.std()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    in_dim = 8
    x, y = make_data(2560, in_dim)
    x_train, y_train, x_val, y_val = x[:2048], y[:2048], x[2048:], y[2048:]

    model = Regressor(in_dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    loss_fn = nn.MSELoss()

    model.train()
    for step in range(args.steps):
        idx = torch.randint(0, x_train.size(0), (args.batch_size,))
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | mse {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.4f}")

    model.eval()
    with torch.no_grad():
        val_mse = loss_fn(model(x_val), y_val).item()
    print(f"val mse {val_mse:.4f} (predicting the mean scores 1.0)")

    if args.save:
        torch.save(model.state_dict(), args.save)
        print(f"saved {args.save}")
    sys.exit(0)


if __name__ == "__main__":
    main()

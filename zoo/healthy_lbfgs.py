"""Healthy full-batch regression with torch.optim.LBFGS and a closure.

The scientific-computing / curve-fitting style: a small tanh MLP fits a smooth 2-D function
from noisy samples, all data in one full batch, optimized by L-BFGS with a strong-Wolfe line
search. Here the same batch on every step is correct (it is the whole data set), the closure
re-evaluates loss and gradients several times per optimizer.step() (line search), and ~20
outer steps are enough.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="L-BFGS outer steps")
    p.add_argument("--max-iter", type=int, default=10, help="inner iterations per step")
    p.add_argument("--log-every", type=int, default=2)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Regressor(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def target_fn(x: torch.Tensor) -> torch.Tensor:
    return 2.0 * torch.sin(math.pi * x[:, 0]) * torch.cos(0.5 * math.pi * x[:, 1]) + 0.5 * x[:, 1]


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    x = 2 * torch.rand(512, 2) - 1  # inputs in [-1, 1]^2
    y = target_fn(x) + 0.05 * torch.randn(512)
    x_test = 2 * torch.rand(256, 2) - 1
    y_test = target_fn(x_test)

    model = Regressor()
    optimizer = torch.optim.LBFGS(
        model.parameters(), lr=1.0, max_iter=args.max_iter, history_size=10,
        line_search_fn="strong_wolfe",
    )
    loss_fn = nn.MSELoss()

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    model.train()
    for step in range(args.steps):
        loss = optimizer.step(closure)
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:3d} | train mse {loss.item():.6f}")

    model.eval()
    with torch.no_grad():
        test_mse = loss_fn(model(x_test), y_test).item()
    print(f"test mse {test_mse:.6f} (noise variance {0.05 ** 2:.6f})")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

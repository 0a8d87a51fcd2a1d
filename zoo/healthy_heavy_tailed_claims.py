"""Healthy regression of insurance-claim amounts, heavy-tailed by nature: no finding.

A claim's amount is lognormal given the policy (log-amount linear in 8 policy features, plus
noise of sd 1: most claims near the median, one in a few hundred over 20x it). An MLP
(8-64-64-1, ReLU) predicts the raw amount with an MSE loss, as a pricing model that must get the
mean right does, trained by Adam (lr 3e-3) on shuffled batches of 64 from 8,192 claims for
four epochs. A batch that draws one of the rare large claims has a loss many times the moving
average every few dozen steps (26 "spikes" from step 46 on, for loss-spike before it judged a
jump by the loss's own excursions), and the run converges all the same: those batches are the
data's own tail, not batches unlike the data.

traindoc-expect:
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def claims(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    policy = torch.randn(n, 8, generator=gen)
    weights = torch.linspace(-0.4, 0.4, 8)
    log_amount = policy @ weights + torch.randn(n, generator=gen)
    return policy, log_amount.exp().unsqueeze(1)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y = claims(8192, gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, generator=gen)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    mse = nn.MSELoss()
    for epoch in range(args.epochs):
        total = 0.0
        for policy, amount in loader:
            loss = mse(model(policy), amount)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: mean batch MSE {total / len(loader):.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Multi-label tagger whose prior-probability bias init has the wrong sign: first BCE ~4.4, not ln 2.

RetinaNet's trick for rare positives: initialise the output bias so that the untrained model
predicts the prior p = 0.01, `bias = -log((1 - p) / p)` = -4.6. This script drops the minus
sign (`math.log((1 - p) / p)`), so every untrained sigmoid output starts at 0.99 while only
about 5% of the labels are positive: the first binary cross-entropy is about 4.4 per element
instead of ln 2 = 0.69 (or less, with the right prior), and the first steps are spent pulling
every bias down. Seed 003's "initial loss" check, for BCE.

preflight-expect: initial-loss:fail gradients:pass overfit:pass
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--prior", type=float, default=0.01)
    return p.parse_args()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    n_tags = 50
    x = torch.randn(2048, 32)
    w = torch.randn(32, n_tags)
    y = ((x @ w) > 9.0).float()  # about 5% positives
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, n_tags))
    nn.init.constant_(model[2].bias, math.log((1 - args.prior) / args.prior))  # BUG: should be -log(...)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.binary_cross_entropy_with_logits(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"step {step:3d} | bce {loss.item():.4f} | positives {yb.mean().item():.3f}")
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()

"""A classifier whose `optimizer.zero_grad()` sits between `loss.backward()` and `optimizer.step()`.

The lines of the usual three-line update were reordered (backward, zero_grad, step): every
gradient the backward just computed is dropped (set to None) before the step, so AdamW never
changes a weight. Preflight sees no gradient on any parameter at the step; that every one of
them had one right after backward does not make this a warm-up freeze, which leaves out only
some of the parameters.

preflight-expect: gradients:fail:no-gradient
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(1024, 20)
    y = (x[:, :5].sum(1) > 0).long() + (x[:, 5] > 1).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

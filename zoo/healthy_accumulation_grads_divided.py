"""Healthy gradient accumulation whose micro-batch losses are summed undivided and the gradients divided once, before the step.

A supervised loop over a DataLoader with 4 micro-batches of 32 per optimizer step (SGD, momentum
0.9): each micro-batch's cross-entropy goes to ``backward()`` as computed, and before
``optimizer.step()`` the loop divides the accumulated gradients in place,
``for p in model.parameters(): p.grad /= accum_steps``, as training scripts that accumulate
a variable number of micro-batches often do. The step uses the mean gradient over the 128
samples, the same as dividing each loss. The step's gradient norm is a quarter of the norm the
last backward left. A healthy run that must stay quiet (zoo/unscaled_accumulation.py forgets
the division).

traindoc-expect:
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--accum_steps", type=int, default=4)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(2048, 20)
    y = (x[:, :5].sum(1) > 0).long() + (x[:, 5] > 1).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        optimizer.zero_grad()
        for i, (xb, yb) in enumerate(loader):
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            if (i + 1) % args.accum_steps == 0:
                for p in model.parameters():
                    p.grad /= args.accum_steps
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

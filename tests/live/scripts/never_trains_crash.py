"""A training script that raises ValueError while building its data, before any optimizer step.

The model and the optimizer are built, then the data loading code finds a column count it does
not expect and raises ValueError, so the loop never starts. `python never_trains_crash.py` exits
1 with that traceback; `traindoc run` must exit 1 too, show the same ValueError traceback, and
say that no training was observed (not "No findings", which reads as a clean bill of health).
"""

import argparse

import torch
import torch.nn as nn


def load_features(n_columns: int) -> torch.Tensor:
    expected = 4
    if n_columns != expected:
        raise ValueError(f"feature file has {n_columns} columns, expected {expected}")
    return torch.randn(64, expected)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = load_features(n_columns=5)
    for _ in range(10):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""A float64 regression whose loss is NaN at iteration 41 only; SGD then carries the NaN into
the weights.

Scientific code often trains in double precision: model.double(), float64 inputs, plain SGD, 80
steps. At iteration 41 (0-based: the 42nd optimizer step) the loss is multiplied by NaN, as a
0/0 in a physics term would do once; backward makes every gradient NaN and optimizer.step()
writes NaN into every weight, so every later loss is NaN too. traindoc must handle float64
tensors like float32 ones: report `nonfinite` at step 41, count all 80 steps and disable none
of its probes. The script prints the step at which the loss was first NaN.
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--nan-at", type=int, default=41)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)

    model = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 1)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.rand(256, 3, dtype=torch.float64) * 2 - 1
    y = torch.sin(math.pi * x[:, :1]) * x[:, 1:2] + 0.1 * x[:, 2:]

    first_nan = None
    for step in range(args.steps):
        loss = F.mse_loss(model(x), y)
        if step == args.nan_at:
            loss = loss * float("nan")  # one bad term, once
        opt.zero_grad()
        loss.backward()
        opt.step()
        if first_nan is None and torch.isnan(loss):
            first_nan = step
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d} | loss {loss.item():.6f}")

    print(f"first NaN loss at step {first_nan}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""A training script with a syntax error: a missing closing parenthesis.

Python cannot even compile the file, so nothing runs: `python never_trains_syntax.py` exits 1
with a SyntaxError; `traindoc run` must exit 1 too, show the user's SyntaxError (file and line),
and say that no training was observed.
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean(
        opt.zero_grad()
        loss.backward()
        opt.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

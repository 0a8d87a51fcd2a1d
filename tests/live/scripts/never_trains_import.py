"""A training script that dies on import: a dependency that is not installed.

The user runs a train.py copied from another machine; its third import names a package this
environment lacks (a tokenizer or logging helper), so Python raises ModuleNotFoundError before
a model exists. `python never_trains_import.py` exits 1 with the traceback; `traindoc run` must
exit 1 too, show the same traceback, and say that no training was observed.
"""

import argparse

import torch
import torch.nn as nn
import traindoc_zoo_missing_helper  # noqa: F401  (not installed anywhere)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

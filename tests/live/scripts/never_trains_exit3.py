"""A training script that exits with status 3 before any optimizer step.

A launcher-style script checks its environment first and calls sys.exit(3) when a required
setting is missing (here: the data directory variable is not set), after building the model but
before the loop. `python never_trains_exit3.py` exits 3; `traindoc run` must exit 3 too (job
schedulers read the code) and say that no training was observed.
"""

import argparse
import os
import sys

import torch
import torch.nn as nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data_dir = os.environ.get("TRAINDOC_ZOO_DATA_DIR_NEVER_SET")
    if data_dir is None:
        print("error: TRAINDOC_ZOO_DATA_DIR_NEVER_SET is not set", file=sys.stderr)
        sys.exit(3)
    for _ in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

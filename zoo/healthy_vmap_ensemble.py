"""Healthy ensemble of five MLPs trained as one with torch.func: `stack_module_state` and `vmap` over `functional_call`.

The model-ensembling recipe of the torch.func documentation: five copies of a small regression
MLP are made, their parameters stacked along a new first dimension (``stack_module_state``), and
one call of ``vmap(functional_call)`` over a stateless copy on the meta device runs all five on
the same batch. Adam steps the stacked parameters (leaves with requires_grad) after a single
backward of the summed MSE. The data are 8 features and a smooth function of two of them.

Inside ``vmap`` every tensor a module sees is a batched stand-in that must not leave the
transform; traindoc measures nothing there, and the step, the loss and the stacked parameters
are judged as usual. A healthy run that must stay quiet.

traindoc-expect:
"""

import argparse
import copy

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap


def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(0)
    models = [make_mlp() for _ in range(args.members)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def fmodel(p, b, x):
        return functional_call(base, (p, b), (x,))

    ensemble = vmap(fmodel, in_dims=(0, 0, None))
    optimizer = torch.optim.Adam(params.values(), lr=3e-3)
    x_all = torch.randn(1024, 8)
    y_all = torch.sin(2 * x_all[:, :1]) + 0.5 * x_all[:, 1:2] ** 2

    for step in range(args.steps):
        idx = torch.randint(0, len(x_all), (64,))
        preds = ensemble(params, buffers, x_all[idx])  # (members, batch, 1)
        loss = ((preds - y_all[idx]) ** 2).mean(dim=(1, 2)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step}: mean member loss {loss.item() / args.members:.4f}")

    if args.save:
        torch.save({k: v.detach() for k, v in params.items()}, args.save)


if __name__ == "__main__":
    main()

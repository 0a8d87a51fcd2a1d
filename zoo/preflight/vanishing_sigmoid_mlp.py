"""A deep plain MLP with sigmoid activations and no normalization: the first layers get no signal.

Twelve Linear + Sigmoid layers of width 64, PyTorch's default init, no normalization and no skip
connections, trained with SGD and momentum, as in a textbook from before ReLU. The sigmoid's
derivative is at most 0.25, and each layer multiplies the backward signal by about 0.25 times
its weight's gain: at step 0 the first layers' gradients are about 1e-9 of the last layers'
(RMS 4e-11 against 4e-2 on this machine), so under SGD they stay at their random init and the loss stalls at what the top
layers can fit on random features. preflight's gradient probe compares the gradient RMS of
the input-side and the output-side weight matrices at step 0.

preflight-expect: gradients:fail:vanishing-gradients
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--depth", type=int, default=12)
    return p.parse_args()


def make_mlp(in_dim: int, width: int, depth: int, n_classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    dim = in_dim
    for _ in range(depth - 1):
        layers += [nn.Linear(dim, width), nn.Sigmoid()]
        dim = width
    layers.append(nn.Linear(dim, n_classes))
    return nn.Sequential(*layers)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    centers = torch.randn(5, 20) * 2.0
    y = torch.randint(0, 5, (2048,))
    x = centers[y] + torch.randn(2048, 20)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)
    model = make_mlp(20, 64, args.depth, 5)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % 50 == 0:
                print(f"step {step:4d} | loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()

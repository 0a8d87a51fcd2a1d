"""Link predictor scoring node pairs with an unscaled bilinear form: the healthy twin of saturated_pairwise_bce.

The same pairwise scorer without the two scalings (a plain bilinear score), the sigmoid
inside `nn.BCEWithLogitsLoss`: probabilities spread across pairs and graphs.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

N_NODES, D_IN, D = 24, 16, 128


class PairScorer(nn.Module):
    def __init__(self, scale_twice: bool) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(D_IN, D), nn.GELU(), nn.Linear(D, D))
        self.q, self.k = nn.Linear(D, D), nn.Linear(D, D)
        self.scale = D ** -0.5 if scale_twice else 1.0  # applied to q and to k

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:  # (B, N, D_IN) -> (B, N, N) logits
        h = self.embed(nodes)
        q, k = self.q(h) * self.scale, self.k(h) * self.scale
        return q @ k.transpose(1, 2)


def make_graphs(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    nodes = torch.randn(batch, N_NODES, D_IN, generator=gen)
    sim = nodes[..., :4] @ nodes[..., :4].transpose(1, 2)
    return nodes, (sim > 1.5).float()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--twice", action="store_true", help="scale q and k by d**-0.5 each (the bug)")
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = PairScorer(scale_twice=args.twice)
    criterion = nn.BCEWithLogitsLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        nodes, adj = make_graphs(16, gen)
        loss = criterion(model(nodes), adj)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

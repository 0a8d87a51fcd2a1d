"""Triplet-loss embedding model whose hand-written distance takes sqrt(0): NaN gradients.

A metric-learning MLP maps 32-d points of 10 classes onto a unit sphere and is trained with a
triplet margin loss on hand-rolled Euclidean distances, `((a - p) ** 2).sum(1).sqrt()`. The
positive for each anchor is drawn from the anchor's class, and the sampler does not exclude the
anchor itself; when it picks it, the distance is exactly 0 and the backward of sqrt at 0 is
inf * 0 = NaN. The loss of that step is still finite, but every gradient is NaN; Adam writes the
NaN into every weight and from the next step on the loss is NaN. Nothing guards it and the loop
keeps printing `loss nan`. With the default seed the first self-pair is drawn at step 2 (NaN
gradients at step 2, NaN loss from step 3 on).
Catalog `nonfinite`.

traindoc-expect: nonfinite@2
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

N_CLASSES = 10
PER_CLASS = 200
IN_DIM = 32


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=48, help="triplets per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--margin", type=float, default=0.2)
    p.add_argument("--emb-dim", type=int, default=16)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Embedder(nn.Module):
    def __init__(self, in_dim: int, hidden: int, emb_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, emb_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(x), dim=-1)


def make_dataset(gen: torch.Generator):
    """Balanced Gaussian clusters; index tensor `by_class[c]` lists the samples of class c."""
    centers = torch.randn(N_CLASSES, IN_DIM, generator=gen) * 1.5
    y = torch.arange(N_CLASSES).repeat_interleave(PER_CLASS)
    x = centers[y] + torch.randn(len(y), IN_DIM, generator=gen)
    by_class = torch.arange(len(y)).view(N_CLASSES, PER_CLASS)
    return x, y, by_class


def sample_triplets(y: torch.Tensor, by_class: torch.Tensor, n: int, gen: torch.Generator):
    anchor = torch.randint(0, len(y), (n,), generator=gen)
    pos = by_class[y[anchor], torch.randint(0, PER_CLASS, (n,), generator=gen)]
    neg_class = (y[anchor] + torch.randint(1, N_CLASSES, (n,), generator=gen)) % N_CLASSES
    neg = by_class[neg_class, torch.randint(0, PER_CLASS, (n,), generator=gen)]
    return anchor, pos, neg


def euclidean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return ((a - b) ** 2).sum(dim=1).sqrt()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, y, by_class = make_dataset(gen)
    model = Embedder(IN_DIM, 64, args.emb_dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for step in range(args.steps):
        a, p, n = sample_triplets(y, by_class, args.batch_size, gen)
        emb_a, emb_p, emb_n = model(x[a]), model(x[p]), model(x[n])
        d_ap = euclidean(emb_a, emb_p)
        d_an = euclidean(emb_a, emb_n)
        loss = F.relu(d_ap - d_an + args.margin).mean()

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f} | d_ap {d_ap.mean().item():.3f}"
                  f" | d_an {d_an.mean().item():.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""fp16 AMP metric learning whose NaN gradients the GradScaler silently skips: the scale collapses.

A small embedding network is trained with torch.autocast(dtype=torch.float16) and a
torch.amp.GradScaler to preserve distances (an MDS / siamese-style loss): for every pair i < j
of the batch, the distance of the embeddings should match the distance of the inputs. The
pairwise distance is written by hand as `diff.pow(2).sum(-1).sqrt()`. Batches are drawn with
torch.randint, with replacement, from 1000 points, so most batches of 64 hold some point twice:
that pair's distance is sqrt(0) = 0, whose backward is 0/0 = NaN. The loss stays finite. The
GradScaler finds the NaN, skips optimizer.step() and halves its scale, step after step, so the
model trains on the few clean batches while the scale sinks from 65536 toward 0. CPU
autocast/GradScaler stand in for the CUDA ones.

traindoc-expect: grad-scaler-collapse
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Embedder(nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def pair_distances(z: torch.Tensor) -> torch.Tensor:
    """Euclidean distance of every pair i < j of rows of z."""
    i, j = torch.triu_indices(z.size(0), z.size(0), offset=1)
    diff = z[i] - z[j]
    return diff.pow(2).sum(-1).sqrt()  # BUG: the gradient of sqrt at 0 is inf; 0 * inf = NaN


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    device_type = "cpu"  # "cuda" on a GPU

    # 1000 points near a 4-dimensional subspace of R^32
    basis = torch.randn(4, 32)
    data = torch.randn(1000, 4) @ basis + 0.05 * torch.randn(1000, 32)

    model = Embedder(32, 64, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(device_type)

    for step in range(args.steps):
        idx = torch.randint(0, data.size(0), (args.batch_size,))
        x = data[idx]
        with torch.autocast(device_type, dtype=torch.float16):
            z = model(x)
            loss = F.mse_loss(pair_distances(z.float()), pair_distances(x))

        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f} | scale {scaler.get_scale():.3g}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Multi-task property predictor whose loss is clamped at 1e6, which zeroes the gradient.

The model predicts a reaction energy (raw units, heavy-tailed, hundreds to tens of thousands)
and a phase class from 12 descriptors. The energy MSE is unnormalized, so early on it is ~1e6 to
1e7 and the author "stabilised" the run with `loss = torch.clamp(loss, max=1e6)`. On every step
where the total exceeds the cap, clamp passes back exactly zero gradient: the loss handed to
backward is the constant 1e6, nothing updates, and the predictions stay far too small, so the
loss stays above the cap. Only the rare batch without a large-energy outlier (11 of the 200
steps) trains at all, and the model barely moves: the 10-step median of the loss is 1e6 from
start to end. Reproduces seed 000 §2 (loss clamping); catalog `constant-loss` and
`stalled-loss`.

traindoc-expect: constant-loss@0 stalled-loss@0
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_FEATURES = 12
N_PHASES = 3
LOSS_CAP = 1e6


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--phase-weight", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class PropertyNet(nn.Module):
    """Shared trunk, one regression head (energy) and one classification head (phase)."""

    def __init__(self, n_in: int, hidden: int, n_phases: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.energy_head = nn.Linear(hidden, 1)
        self.phase_head = nn.Linear(hidden, n_phases)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.energy_head(h).squeeze(-1), self.phase_head(h)


def make_dataset(n: int, gen: torch.Generator):
    """Descriptors -> (energy in raw units, heavy-tailed; phase label)."""
    x = torch.randn(n, N_FEATURES, generator=gen)
    w = torch.randn(N_FEATURES, generator=gen)
    z = x @ w / w.norm()
    energy = 400.0 * torch.exp(1.3 * z)  # median ~400, a few samples in the tens of thousands
    phase = torch.bucketize(x[:, 0] + 0.5 * x[:, 1], torch.tensor([-0.5, 0.5]))
    return x, energy, phase


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    x, energy, phase = make_dataset(64 * args.batch_size, gen)
    loader = DataLoader(
        TensorDataset(x, energy, phase),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(1),
    )

    model = PropertyNet(N_FEATURES, args.hidden, N_PHASES)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    step = 0
    capped = 0
    while step < args.steps:
        for xb, eb, pb in loader:
            e_pred, p_logits = model(xb)
            loss_energy = F.mse_loss(e_pred, eb)
            loss_phase = F.cross_entropy(p_logits, pb)
            loss = loss_energy + args.phase_weight * loss_phase
            # the energy term is huge early in training: cap it so it cannot blow up the run
            capped += int(loss.item() > LOSS_CAP)
            loss = torch.clamp(loss, max=LOSS_CAP)

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(
                    f"step {step:4d} | loss {loss.item():.4e} | energy mse {loss_energy.item():.4e}"
                    f" | phase ce {loss_phase.item():.4f}"
                )
            step += 1
            if step >= args.steps:
                break

    print(f"done: {step} steps, {capped} of them hit the loss cap")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""Lightning DDP on two CPU processes, healthy: the twin of lightning_ddp_rank_mislabeled.

A LightningModule regressor trained with `L.Trainer(accelerator="cpu", devices=2,
strategy="ddp")`: Lightning starts rank 1 by running this script again as a subprocess (its
default launcher for several devices), and the DataLoader gets a DistributedSampler. Every
rank pairs each input with its own label; under `traindoc run` rank 1's subprocess watches
itself and rank 0 merges its losses and findings: none.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SKEWED_RANKS: tuple[int, ...] = ()  # lightning_ddp_rank_mislabeled: (1,)


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="rank 0 writes the weights here")
    return p.parse_args()


def targets_for(rank: int, y: torch.Tensor) -> torch.Tensor:
    return y.roll(1, dims=0) if rank in SKEWED_RANKS else y


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = F.mse_loss(self.net(x), targets_for(self.global_rank, y))
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    args = get_args()
    L.seed_everything(0, verbose=False)
    x = torch.randn(512, 8)
    y = torch.tanh(x @ torch.randn(8, 1)) + 0.05 * torch.randn(512, 1)
    model = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=args.epochs, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
    if args.save and trainer.global_rank == 0:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

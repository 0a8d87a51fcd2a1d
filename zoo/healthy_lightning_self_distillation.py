"""Self-distillation in a LightningModule, the last layer frozen for the first epoch from a hook.

The same method as `healthy_dino_last_layer_warmup.py`, in the style of self-supervised
libraries built on Lightning: the student and its EMA teacher live in one LightningModule, the
teacher follows the student in `on_train_batch_end`, and the head's last layer has its gradient
removed in `on_after_backward` while `current_epoch < freeze_last_layer`. Lightning runs the
forward and the backward inside the optimizer's closure, so the gradient is removed between the
backward and the update of the same `optimizer.step()` call. Must stay quiet.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset


class Head(nn.Module):
    def __init__(self, dim: int = 32, out_dim: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, 16))
        self.last_layer = nn.Linear(16, out_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last_layer(F.normalize(self.mlp(x), dim=-1))

    def cancel_last_layer_gradients(self, epoch: int, freeze_epochs: int) -> None:
        if epoch < freeze_epochs:
            for p in self.last_layer.parameters():
                p.grad = None


class SelfDistillation(LightningModule):
    def __init__(self, freeze_last_layer: int = 1, momentum: float = 0.99) -> None:
        super().__init__()
        self.freeze_last_layer, self.momentum = freeze_last_layer, momentum
        self.student = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), Head())
        self.teacher = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), Head())
        self.teacher.load_state_dict(self.student.state_dict())
        self.teacher.requires_grad_(False)
        self.register_buffer("center", torch.zeros(1, 64))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        (x,) = batch
        a, b = x + 0.1 * torch.randn_like(x), x * (1 + 0.1 * torch.randn_like(x))
        with torch.no_grad():
            t = self.teacher(torch.cat([a, b]))
        s = self.student(torch.cat([b, a]))  # each view predicts the teacher's other view
        q = F.softmax((t - self.center) / 0.04, dim=-1)
        loss = torch.sum(-q * F.log_softmax(s / 0.1, dim=-1), dim=-1).mean()
        self.center = 0.9 * self.center + 0.1 * t.mean(dim=0, keepdim=True)
        self.log("loss", loss)
        return loss

    def on_after_backward(self) -> None:
        self.student[2].cancel_last_layer_gradients(self.current_epoch, self.freeze_last_layer)

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        with torch.no_grad():
            for ps, pt in zip(self.student.parameters(), self.teacher.parameters()):
                pt.mul_(self.momentum).add_((1 - self.momentum) * ps)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.student.parameters(), lr=1e-3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    data = torch.randn(256, 32)
    model = SelfDistillation()
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=args.epochs, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(data), batch_size=32, shuffle=True))
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()

"""A training script for Hugging Face Accelerate with its DeepSpeed plugin (ZeRO), one process:
``accelerator.prepare`` builds the DeepSpeed engine, and the loop is Accelerate's own
(``accelerator.backward(loss)``, ``optimizer.step()``, ``optimizer.zero_grad()``), which
Accelerate turns into the engine's calls.

``--detach`` detaches the auxiliary head's output before its loss: that head never learns, and
ZeRO fills its share of the flat gradient with zeros (no-gradient).
"""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator, DeepSpeedPlugin
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--stage", type=int, default=3)
p.add_argument("--detach", action="store_true")
args = p.parse_args()
for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", os.environ.get("TEST_PORT", "29601")),
                   ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
    os.environ.setdefault(key, value)  # what `accelerate launch` sets


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)
        self.aux = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        aux = self.aux(h)
        return self.head(h), aux.detach() if args.detach else aux


accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=args.stage, gradient_clipping=1.0))
torch.manual_seed(0)
x = torch.randn(512, 8)
y = x.sum(1, keepdim=True).tanh()
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
model = TwoHeads()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

for epoch in range(2):
    for xb, yb in loader:
        out, aux = model(xb)
        loss = F.mse_loss(out, yb) + 0.1 * F.mse_loss(aux, yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")

"""A training script written for Hugging Face Accelerate, run by `accelerate launch` (the tests
start two CPU processes: `--multi_gpu`, which on a machine without GPUs runs gloo).

`--clip-main-only` clips the gradients on the main process alone, a mistake of code that
guards its logging and its clipping with one `if accelerator.is_main_process:`: the replicas
differ from the first step on, and each rank goes on training its own model.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--clip-main-only", action="store_true")
p.add_argument("--save", default=None)
args = p.parse_args()

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
x = torch.randn(512, 8)
y = x.sum(1, keepdim=True).tanh()
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

for epoch in range(args.epochs):
    model.train()
    for xb, yb in loader:
        loss = F.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        if args.clip_main_only:
            if accelerator.is_main_process:
                accelerator.clip_grad_norm_(model.parameters(), 0.05)
        else:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")

accelerator.wait_for_everyone()
if args.save:
    state = accelerator.unwrap_model(model).state_dict()
    torch.save(state, f"{args.save}.rank{accelerator.process_index}")

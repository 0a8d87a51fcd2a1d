"""Two torchrun ranks, each training its own copy on gloo, both ended by SIGTERM at step 5 (as a
scheduler's preemption ends a job); a barrier first, so both have taken the same steps."""

import os
import signal

import torch
import torch.distributed as dist

AT, STEPS = 5, 12
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(STEPS):
    if step == AT:
        dist.barrier()
        os.kill(os.getpid(), signal.SIGTERM)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

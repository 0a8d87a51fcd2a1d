"""fp16 AMP whose GradScaler skips the first optimizer steps; the loop order is right.

fp16 autocast with a GradScaler started at init_scale=2**24: the first scaled fp16 gradients
overflow, scaler.step skips optimizer.step(), scaler.update() halves the scale, and
scheduler.step() (correctly after scaler.step) runs "before" the optimizer's first real step.
PyTorch warns about the order; this is its own false alarm. Runs on CPU (GradScaler("cpu")).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24)
x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
for step in range(20):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()

"""PyTorch's compiled-optimizer recipe: `opt.step()` inside a `torch.compile`'d function, with a
tensor learning rate and an LR scheduler. Dynamo traces the step and its global step hooks, so
no hook of traindoc's runs in it and no mode of traindoc's may be up when it is called (a mode
on the stack fails dynamo's guard: one recompilation per change, then eager Adam after the
recompile limit, whose weights differ in the last bits). Prints the weights; the graph count
goes to stderr, where the test reads it."""

import sys

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5)


@torch.compile(backend="eager")
def opt_step() -> None:
    opt.step()


for step in range(20):
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt_step()
    sched.step()
print("graphs", counters["stats"]["unique_graphs"], file=sys.stderr)
print("checksum", repr(sum(float(p.detach().double().sum()) for p in model.parameters())))

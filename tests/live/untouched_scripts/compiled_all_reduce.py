"""torch.compile(fullgraph=True) of a training step that averages its logged loss over the
ranks with `dist.all_reduce`: dynamo maps torch's own collective to a traceable one, so the
function it finds must be torch's (a wrapper that reads a clock breaks the graph, and
fullgraph=True makes that an error). One gloo rank on an in-memory store. Prints the weights;
the graph count goes to stderr, where the test reads it (a compiled function may compile once
more under traindoc: docs/live-patches.md)."""

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._dynamo.utils import counters

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.compile(fullgraph=True, backend="eager")
def forward(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    loss = F.cross_entropy(model(x), y)
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    return loss, logged / dist.get_world_size()


for step in range(30):
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss, logged = forward(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("graphs", counters["stats"]["unique_graphs"], file=sys.stderr)
print("logged", repr(float(logged)))
print("checksum", repr(sum(float(p.detach().double().sum()) for p in model.parameters())))
dist.destroy_process_group()

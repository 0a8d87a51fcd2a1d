"""torch.compile(fullgraph=True) of a *function* that calls the model and the loss: it runs,
with the weights of a bare run. (No module hook can tell a compiled function before its first
call: dynamo compiles it once more, when traindoc's sampled-step hooks come down; the graph
count goes to stderr, where the test reads it.)"""

import sys

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@torch.compile(fullgraph=True)
def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = loss_fn(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("graphs", counters["stats"]["unique_graphs"], file=sys.stderr)
print("checksum", repr(sum(float(p.detach().double().sum()) for p in model.parameters())))

"""A ``torch.compile(fullgraph=True)`` function that clips the gradients with
``clip_grad_norm_`` and returns the norm, called between the backward and the optimizer step
(under traindoc, dynamo traces through torch's clipping wrapper into traindoc's dispatcher,
which stands aside while it compiles; a wrapper of the private clipping function that read
the thread id broke the trace). Prints the norms and the final weights; the graph count goes
to stderr."""

import sys

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.compile(fullgraph=True)
def clip_gradients(params):
    return torch.nn.utils.clip_grad_norm_(params, 0.5)


norms = []
for step in range(12):
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    norms.append(round(float(clip_gradients(list(model.parameters()))), 6))
    opt.step()
print("norms", norms)
print("checksum", repr(float(sum(p.detach().double().sum() for p in model.parameters()))))
print("graphs", counters["stats"]["unique_graphs"], file=sys.stderr)
